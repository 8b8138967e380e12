"""`python -m seq2seq.align ckpt=PATH src=FILE tgt=FILE [out=FILE] [gold=FILE]
[reverse_ckpt=PATH]`: word alignments of a parallel text from a trained model's attention.

Each pair is teacher-forced through the model (the target line fed as the decoder's input) and
its attention read as links between the whitespace words of the two lines
(`seq2seq.evaluation.word_links`: the reading, `reading=` and `layer=`, is said on stderr);
the links are written in the Pharaoh format, `i-j` source-target word indices from 0, one line
a pair, to `out` or stdout. With `reverse_ckpt`, a model of the other direction (tgt→src)
aligns the same pairs too and the two are symmetrised (`symmetrize=`: intersection, union or
grow-diag-final, as fast_align's atools; `seq2seq.evaluation.pharaoh`). With `gold=FILE` (sure
`i-j`, possible `i?j` or `ipj`; `possible=FILE` a second file of possible links), the
precision, recall and AER of every alignment go to stderr, with eflomal's links of the same
text alone as a baseline where eflomal is installed. Bad input (line counts that differ, an
empty line, bytes that are not UTF-8, a gold link past its sentence) stops the run with one
line naming the file and line (exit status 2).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from torch import Tensor

from seq2seq.alignment import AlignerUnavailable, parse_links, run_eflomal
from seq2seq.choices import Choice
from seq2seq.config import register_configs
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.evaluation.pharaoh import (
    SYMMETRIZATIONS,
    Link,
    Scores,
    format_links,
    read_gold,
    read_lines,
    score_links,
)
from seq2seq.evaluation.word_links import (
    Reading,
    choose_reading,
    teacher_forced,
    word_links,
)
from seq2seq.inference import Loaded, load_models, resolve_device


class AttentionReading(Choice):
    attention = "attention"
    shift_att = "shift_att"


@dataclass
class AlignConfig:
    """`python -m seq2seq.align` (configs/align.yaml): a parallel text's word links. The schema
    lives here, beside its one user, and is registered by `register_align_config`."""

    ckpt: Any = MISSING  # a checkpoint, or a list of them: an ensemble
    src: str = MISSING
    tgt: str = MISSING
    out: str | None = MISSING
    reading: AttentionReading = MISSING
    layer: Any = MISSING  # validation | a decoder layer from 0
    gold: str | None = MISSING
    possible: str | None = MISSING
    reverse_ckpt: str | None = MISSING
    symmetrize: str = MISSING  # intersection | union | grow-diag-final (not a Python name)
    batch_size: int = MISSING
    device: str = MISSING


def register_align_config() -> None:
    """Every schema of `seq2seq.config`, and this entry point's."""
    register_configs()
    ConfigStore.instance().store(name="align_schema", node=AlignConfig)


register_align_config()


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def read_pairs(src: str | Path, tgt: str | Path) -> tuple[list[str], list[str]]:
    """The lines of a parallel text.

    Raises:
        UserError: unreadable files, bytes that are not UTF-8, line counts that differ, a
            line with no word (naming the file and line).
    """
    sources, targets = read_lines(src, "source text"), read_lines(tgt, "target text")
    if len(sources) != len(targets):
        raise UserError(f"{src} has {len(sources)} lines, {tgt} has {len(targets)}: a parallel "
                        "text has one target line for each source line")
    for path, lines in ((src, sources), (tgt, targets)):
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                raise UserError(f"{path} line {number}: empty; each pair needs words on both "
                                "sides (leave the pair out of both files)")
    return sources, targets


@dataclass
class TeacherForced:
    """Pairs' attention teacher-forced as `align` reads it.

    Attributes:
        reading: the attention read (`choose_reading`).
        src_ids, tgt_ids: each pair's piece ids, cut to the model's length limits (EOS aside).
        src_spans, tgt_spans: each piece's character span in its text, cut alike.
        attention: each pair's piece attention (T + 1, S + 1), EOS row and column included.
    """

    reading: Reading
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    src_spans: list[list[tuple[int, int]]]
    tgt_spans: list[list[tuple[int, int]]]
    attention: list[Tensor]


def teacher_forced_attention(
    loaded: Loaded, sources: list[str], targets: list[str], names: tuple[str, str],
    reading: str = "attention", layer: int | str = "validation", batch_size: int = 64,
    verbose: bool = True,
) -> TeacherForced:
    """Every pair's attention from `loaded` teacher-forced on its target text, each side cut
    to the model's length limits (a warning names the line; words past the cut get no link).
    `names`: how warnings name the source and target files; `verbose`: say on stderr which
    attention is read. The explorer reads it too."""
    name = "ensemble" if loaded.members else str(loaded.config.model.name)
    chosen = choose_reading(loaded.model, name, loaded.history, loaded.device, reading, layer)
    if verbose:
        print(f"{loaded.checkpoint}: {chosen.description}", file=sys.stderr)
    tok, cfg = loaded.tokenizer, loaded.config.tokenizer
    ids, spans = [], []
    for texts, encode, span, limit, path in (
        (sources, tok.encode_src, tok.src_spans, int(cfg.max_src_len), names[0]),
        (targets, tok.encode_tgt, tok.tgt_spans, int(cfg.max_tgt_len), names[1]),
    ):
        side = encode(texts)
        for number, pieces in enumerate(side, start=1):
            if len(pieces) >= limit and verbose:  # room for EOS (and BOS), as evaluation does
                warn(f"{path} line {number}: {len(pieces)} pieces is longer than the model "
                     f"allows; the words past piece {limit - 1} get no link")
        ids.append([pieces[: limit - 1] for pieces in side])
        spans.append([s[: limit - 1] for s in span(texts)])
    attention = teacher_forced(loaded.model, ids[0], ids[1], chosen, loaded.device, batch_size)
    return TeacherForced(chosen, ids[0], ids[1], spans[0], spans[1], attention)


def model_links(
    loaded: Loaded, sources: list[str], targets: list[str], names: tuple[str, str],
    reading: str, layer: int | str, batch_size: int,
) -> list[frozenset[Link]]:
    """The links (source word, target word) of every pair from `loaded`'s attention
    (`teacher_forced_attention`)."""
    found = teacher_forced_attention(loaded, sources, targets, names, reading, layer, batch_size)
    return [word_links(attn, s, t, s_spans, t_spans, found.reading.shift)
            for attn, s, t, s_spans, t_spans
            in zip(found.attention, sources, targets, found.src_spans, found.tgt_spans,
                   strict=True)]


def eflomal_links(sources: list[str], targets: list[str]) -> dict[str, list[frozenset[Link]]]:
    """eflomal's links of this text alone: each direction and their grow-diag-final.

    Raises:
        AlignerUnavailable: eflomal is not installed or failed.
    """
    forward, reverse = run_eflomal([" ".join(s.split()) for s in sources],
                                   [" ".join(t.split()) for t in targets])
    if len(forward) != len(sources) or len(reverse) != len(sources):
        raise AlignerUnavailable(f"eflomal wrote {len(forward)} lines for {len(sources)} pairs")
    fwd, rev = [parse_links(line) for line in forward], [parse_links(line) for line in reverse]
    return {"eflomal forward": fwd, "eflomal reverse": rev,
            "eflomal grow-diag-final": [SYMMETRIZATIONS["grow-diag-final"](f, r)
                                        for f, r in zip(fwd, rev, strict=True)]}


def align(
    ckpt: str | Path | list[str | Path],
    src: str | Path,
    tgt: str | Path,
    out: str | Path | None = None,
    reading: str = "attention",
    layer: int | str = "validation",
    gold: str | Path | None = None,
    possible: str | Path | None = None,
    reverse_ckpt: str | Path | None = None,
    symmetrize: str = "grow-diag-final",
    batch_size: int = 64,
    device: str = "auto",
) -> dict[str, Scores]:
    """Write the word links of a parallel text; with `gold`, score every alignment.

    Args:
        ckpt: the src→tgt checkpoint (a list: an ensemble, its mean attention).
        src, tgt: UTF-8 text files, one sentence a line, line n of tgt the translation of
            line n of src.
        out: where the links go, one line a pair; None: stdout.
        reading: attention (the step predicting each word) or shift_att (a Transformer's
            step reading it).
        layer: validation (the Transformer layer chosen on validation where the checkpoint
            records one, else the last) or a decoder layer from 0.
        gold: sure `i-j` and possible `i?j` / `ipj` links, one line a pair; None: no scores.
        possible: a second gold file whose links are all possible.
        reverse_ckpt: a tgt→src checkpoint; its links are symmetrised with the forward ones.
        symmetrize: with `reverse_ckpt`, the alignment written: intersection, union or
            grow-diag-final.
        batch_size: pairs teacher-forced at once (at most).
        device: auto, cpu, cuda, cuda:N or mps.

    Returns:
        With `gold`, each alignment's scores by name (the model, with `reverse_ckpt` the
        reverse model and each symmetrisation, eflomal's where it runs); else empty.

    Raises:
        UserError: bad input (see the module docstring), a bad setting, an unreadable
            checkpoint.
    """
    if symmetrize not in SYMMETRIZATIONS:
        raise UserError(f"symmetrize={symmetrize!r} is not one of {', '.join(SYMMETRIZATIONS)}")
    if possible is not None and gold is None:
        raise UserError("possible=FILE needs gold=FILE, the sure links it adds to")
    sources, targets = read_pairs(src, tgt)
    word_counts = ([len(s.split()) for s in sources], [len(t.split()) for t in targets])
    reference = None if gold is None else read_gold(gold, possible, *word_counts)
    dev = resolve_device(device)
    forward_model = load_models(ckpt, dev)
    data = forward_model.config.data
    alignments = {f"model {data.src_lang}→{data.tgt_lang}": model_links(
        forward_model, sources, targets, (str(src), str(tgt)), reading, layer, batch_size)}
    written = next(iter(alignments.values()))
    if reverse_ckpt is not None:
        backward = load_models(reverse_ckpt, dev)
        back = backward.config.data
        if (back.src_lang, back.tgt_lang) != (data.tgt_lang, data.src_lang):
            warn(f"{reverse_ckpt} was trained {back.src_lang}→{back.tgt_lang}, {ckpt} "
                 f"{data.src_lang}→{data.tgt_lang}: its links are taken as {tgt}→{src}")
        flipped = model_links(backward, targets, sources, (str(tgt), str(src)), reading, layer,
                              batch_size)
        reverse = [frozenset((i, j) for j, i in links) for links in flipped]
        alignments[f"reverse model {back.src_lang}→{back.tgt_lang}"] = reverse
        for name, combine in SYMMETRIZATIONS.items():
            alignments[name] = [combine(f, r) for f, r in zip(written, reverse, strict=True)]
        written = alignments[symmetrize]
    write_links(written, out)
    if reference is None:
        return {}
    try:
        alignments.update(eflomal_links(sources, targets))
    except AlignerUnavailable as err:
        print(f"eflomal baseline: skipped: {err}", file=sys.stderr)
    scores = {name: score_links(links, reference) for name, links in alignments.items()}
    print(report(scores, gold, possible, reference), file=sys.stderr)
    return scores


def write_links(links: list[frozenset[Link]], out: str | Path | None) -> None:
    """Pharaoh lines, one a pair, to `out` (None: stdout)."""
    text = "".join(format_links(pair) + "\n" for pair in links)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"{out}: cannot write the links ({err.strerror})") from None


def report(scores: dict[str, Scores], gold: str | Path | None, possible: str | Path | None,
           reference: list) -> str:
    """The scores as a table: one row an alignment."""
    sure = sum(len(links.sure) for links in reference)
    either = sum(len(links.possible) for links in reference)
    against = f"{gold}" + (f" and {possible}" if possible is not None else "")
    width = max(len(name) for name in scores)

    def fmt(value: float | None) -> str:
        return "   n/a" if value is None else f"{value:6.3f}"

    lines = [f"against {against}: {len(reference)} pairs, {sure} sure links, {either} possible "
             "(sure included); eflomal rows align this text alone",
             f"{'alignment':<{width}}   links  precision  recall     AER"]
    lines += [f"{name:<{width}}  {s.links:6d}     {fmt(s.precision)}  {fmt(s.recall)}  "
              f"{fmt(s.aer)}" for name, s in scores.items()]
    return "\n".join(lines)


@hydra.main(config_path="../configs", config_name="align", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    for key in ("ckpt", "src", "tgt"):
        if OmegaConf.is_missing(cfg, key):
            raise UserError(f"{key}= is required: ckpt=PATH src=FILE tgt=FILE")
    try:
        align(**OmegaConf.to_container(cfg, enum_to_str=True))  # type: ignore[arg-type]
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
