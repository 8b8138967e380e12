"""`python -m seq2seq.translate ckpt=PATH [beam_size=5] [nbest=1] [attention_dir=DIR]
[engine=ctranslate2]`.

Reads one sentence per line from stdin (or `input=FILE`) and writes one translation per line
to stdout, in input order, flushed after every batch. Empty lines stay empty and never reach
the model; lines longer than the model's `tokenizer.max_src_len` are truncated with a warning
naming the line. With `nbest=N` each input line i (counted from 0) gives N lines
`i ||| hypothesis ||| score`. With `attention_dir=DIR` every non-empty line n (counted from 1)
gets a heatmap `DIR/<nnnn>.png` of the attention that produced its translation.
Bytes that are not UTF-8 stop the run with one line naming the input line (exit status 2).
With `engine=ctranslate2`, ckpt is a folder written by `python -m seq2seq.export` and the
CTranslate2 model decodes (`seq2seq.ctranslate2_engine`); the input is handled the same way.
With `ckpt=[A,B,...]` checkpoints sharing one tokenizer decode as one ensemble
(`seq2seq.models.ensemble`), the heatmaps showing their mean attention.
With `alignments=true` each output line ends with ` ||| ` and the word links of that
hypothesis, Pharaoh `i-j` (source-target, whitespace words of the input line and of the printed
output, from 0), from the attention that decoded it (`seq2seq.evaluation.word_links`; the
reading is said on stderr).
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

import hydra
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from seq2seq import ctranslate2_engine
from seq2seq.config import register_configs
from seq2seq.decoding import DecodeSettings
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.evaluation.decode_and_score import decode_ids
from seq2seq.evaluation.hypotheses import one_line
from seq2seq.evaluation.word_links import HypothesisLinks, choose_reading
from seq2seq.inference import load_models, resolve_device, search_settings
from seq2seq.search import Hypothesis
from seq2seq.tokenization import EOS_ID, Tokenizer
from seq2seq.visualization import attention_heatmap, figure_to_png

register_configs()

STDIN = "<stdin>"
ENGINES = ("torch", "ctranslate2")

# Source piece ids (without EOS) of a batch -> up to nbest hypotheses each, in input order.
Decode = Callable[[list[list[int]]], list[list[Hypothesis]]]


def read_lines(stream: BinaryIO, name: str) -> Iterator[tuple[int, str]]:
    """Yield (line number from 1, text without the line ending) of a byte stream.

    Raises:
        UserError: a line is not valid UTF-8 (naming `name`, the line and the byte offset).
    """
    for number, raw in enumerate(stream, start=1):
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(
                f"{name} line {number}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at "
                f"column {err.start + 1}); convert the input to UTF-8 first"
            ) from None


class Translator:
    """Translates batches of numbered lines with one model.

    Args:
        tokenizer: the model's tokenizer.
        config: the run's resolved config (tokenizer.max_src_len, model.name).
        decode: the model's search (the torch model's or a CTranslate2 export's).
        settings: beam size, n-best, length limits and batch size.
        input_name: how warnings name the input (a path or `<stdin>`).
        attention_dir: where heatmap PNGs go; None: no heatmaps.
        links: each hypothesis's word links, appended as ` ||| links`; None: none.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        config: DictConfig,
        decode: Decode,
        settings: DecodeSettings,
        input_name: str,
        attention_dir: Path | None = None,
        links: HypothesisLinks | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.links = links
        self.config = config
        self.decode = decode
        self.settings = settings
        self.input_name = input_name
        self.attention_dir = attention_dir
        self.max_src_len = int(config.tokenizer.max_src_len)
        self.eos_piece = tokenizer.tgt_pieces([EOS_ID])[0]
        self.warned_no_attention = False

    def encode(self, number: int, text: str) -> list[int]:
        """Source ids of one line, truncated (with a warning) to leave room for EOS."""
        ids = self.tokenizer.encode_src([text])[0]
        if len(ids) >= self.max_src_len:
            warn(
                f"{self.input_name} line {number}: {len(ids)} source pieces "
                f"({len(text.split())} words) is longer than the model allows; truncated to "
                f"{self.max_src_len - 1} pieces (tokenizer.max_src_len={self.max_src_len})"
            )
            ids = ids[: self.max_src_len - 1]
        return ids

    def translate(self, lines: list[tuple[int, str]]) -> list[str]:
        """Output lines for numbered input lines, in input order (n-best: N per input line)."""
        tokenizer = self.tokenizer
        todo = [(number, text.strip()) for number, text in lines if text.strip()]
        src_ids = [self.encode(number, text) for number, text in todo]
        found = self.decode(src_ids)
        by_line = dict(zip((number for number, _ in todo), zip(src_ids, found, strict=True),
                           strict=True))
        out: list[str] = []
        for number, line in lines:
            if number not in by_line:
                empty = f"{number - 1} |||  ||| 0.0000" if self.settings.nbest > 1 else ""
                out.append(empty + (" ||| " if self.links is not None else ""))
                continue
            ids, hyps = by_line[number]
            texts = [one_line(tokenizer.decode_tgt(h.tokens)) for h in hyps]
            ends = ([f" ||| {found}" for found in self.links(line.strip(), ids, hyps)]
                    if self.links is not None else [""] * len(hyps))
            if self.settings.nbest > 1:
                out.extend(f"{number - 1} ||| {t} ||| {h.score:.4f}{end}"
                           for t, h, end in zip(texts, hyps, ends, strict=True))
            else:
                out.append(texts[0] + ends[0])
            if self.attention_dir is not None:
                self.heatmap(number, ids, hyps[0].tokens, hyps[0].attention, texts[0])
        return out

    def heatmap(self, number: int, src_ids: list[int], tgt_ids: list[int],
                attention: Tensor | None, text: str) -> None:
        """Write `<attention_dir>/<number>.png`; a model without attention warns once."""
        if attention is None:
            if not self.warned_no_attention:
                warn(f"the {self.config.model.name} model has no attention: no heatmaps "
                     f"are written to {self.attention_dir}")
                self.warned_no_attention = True
            return
        assert self.attention_dir is not None
        tok = self.tokenizer
        src_labels = tok.src_pieces(src_ids) + [self.eos_piece]
        tgt_labels = tok.tgt_pieces(tgt_ids) + [self.eos_piece]
        fig = attention_heatmap(attention, src_labels, tgt_labels, title=text)
        path = self.attention_dir / f"{number:04d}.png"
        try:
            figure_to_png(fig, path)
        except OSError as err:
            raise UserError(f"{path}: cannot write the heatmap ({err.strerror})") from None


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def translate(
    ckpt: str | Path | list[str | Path],
    input: str | Path | None = None,
    beam_size: int | None = None,
    nbest: int = 1,
    batch_size: int | None = None,
    device: str = "auto",
    attention_dir: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    engine: str = "torch",
    alignments: bool = False,
) -> int:
    """Translate lines from `input` (or stdin) to stdout; returns the number of input lines.

    Args:
        ckpt: the checkpoint, e.g. `<run>/checkpoints/best.pt`; a list: an ensemble.
        input: a UTF-8 text file, one sentence per line; None: `stdin`.
        beam_size: beam size; None: the checkpoint's `decoding.beam_size` (1 is greedy).
        nbest: hypotheses per line; above 1, lines are `i ||| hypothesis ||| score`.
        batch_size: lines decoded (and flushed) at once; None: the checkpoint's.
        device: auto, cpu, cuda, cuda:N or mps.
        attention_dir: where to write one heatmap PNG per non-empty line; None: none.
        tokenizer_dir: the tokenizer folder; None: `<run>/tokenizer`.
        stdin: the byte stream read when `input` is None; None: the process's stdin.
        stdout: the byte stream written; None: the process's stdout.
        engine: torch, or ctranslate2 with `ckpt` the folder of `python -m seq2seq.export`
            (which carries its tokenizer; it writes no heatmaps).
        alignments: end each output line with ` ||| ` and its word links (engine=torch).

    Raises:
        UserError: a bad setting, an unreadable checkpoint or input, bytes that are not UTF-8.
    """
    engine = str(engine)
    if engine not in ENGINES:
        raise UserError(f"engine={engine!r} is not one of {', '.join(ENGINES)}")
    decode: Decode
    links: HypothesisLinks | None = None  # alignments=true: each hypothesis's word links
    if engine == "ctranslate2":
        if not isinstance(ckpt, (str, Path)):
            raise UserError("ckpt=[...] needs engine=torch: ctranslate2 decodes one export")
        if attention_dir is not None:
            raise UserError("attention_dir= needs engine=torch: the ctranslate2 engine writes "
                            "no heatmaps")
        if alignments:
            raise UserError("alignments=true needs engine=torch: the word links are read from "
                            "the torch model's attention")
        if tokenizer_dir is not None:
            raise UserError("tokenizer_dir= needs engine=torch: an export folder carries its "
                            "own tokenizer")
        exported = ctranslate2_engine.load_exported(ckpt, device)
        tokenizer, config = exported.tokenizer, exported.config
        settings = search_settings(config, beam_size, batch_size, nbest)
        decode = functools.partial(ctranslate2_engine.decode_ids, exported, settings=settings)
    else:
        loaded = load_models(ckpt, resolve_device(device), tokenizer_dir)
        tokenizer, config = loaded.tokenizer, loaded.config
        settings = search_settings(config, beam_size, batch_size, nbest)
        decode = functools.partial(decode_ids, loaded.model, settings=settings,
                                   device=loaded.device)
        if alignments:
            model_name = "ensemble" if loaded.members else str(config.model.name)
            reading = choose_reading(loaded.model, model_name, loaded.history, loaded.device)
            print(f"alignments: {reading.description}", file=sys.stderr, flush=True)
            links = HypothesisLinks(loaded.model, tokenizer, reading, loaded.device)
    heatmaps = Path(attention_dir) if attention_dir is not None else None
    out = stdout if stdout is not None else sys.stdout.buffer
    with ExitStack() as stack:
        if input is not None:
            try:
                stream: BinaryIO = stack.enter_context(open(input, "rb"))
            except OSError as err:
                raise UserError(f"{input}: cannot read the input ({err.strerror})") from None
            name = str(input)
        else:
            stream = stdin if stdin is not None else sys.stdin.buffer
            name = STDIN
        translator = Translator(tokenizer, config, decode, settings, name, heatmaps, links)
        # Typed at a terminal: answer every line at once instead of waiting for a full batch.
        per_batch = 1 if stream.isatty() else settings.batch_size
        lines = read_lines(stream, name)
        count, failure = 0, None
        while failure is None:
            batch: list[tuple[int, str]] = []
            try:
                batch.extend(itertools.islice(lines, per_batch))
            except UserError as err:  # translate the lines before the bad one, then stop
                failure = err
            if not batch:
                break
            out.write("".join(line + "\n" for line in translator.translate(batch)).encode())
            out.flush()
            count += len(batch)
    if failure is not None:
        raise failure
    return count


@hydra.main(config_path="../configs", config_name="translate", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "ckpt"):
        raise UserError("ckpt=PATH is required: the checkpoint to translate with")
    try:
        translate(**OmegaConf.to_container(cfg))  # type: ignore[arg-type]
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
