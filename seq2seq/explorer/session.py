"""The explorer's model side: the checkpoints given at start, and what the page asks of them.

Every answer is plain JSON-able data (lists, numbers, strings). Attention comes teacher-forced
on a target text, as `python -m seq2seq.align` reads it (`align.teacher_forced_attention`),
so what the page draws for a translation is what `align` would write for the same pair; a
Transformer adds every layer's and head's cross, encoder self and decoder self attention.
Heads are masked as the heads report masks them (`heads.masked`: a head's output zeroed
before W^O). The models are not thread-safe: one lock serves one model call at a time.

Shapes in the answers: S source pieces and T target pieces, each with its EOS; L layers, H
heads; Sw and Tw whitespace words.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seq2seq.align import teacher_forced_attention
from seq2seq.data import load_source
from seq2seq.data.batching import collate
from seq2seq.evaluation.aer import piece_words, word_attention
from seq2seq.evaluation.decode_and_score import decode_ids, eval_mode
from seq2seq.evaluation.head_stats import KINDS
from seq2seq.evaluation.hypotheses import one_line
from seq2seq.evaluation.metrics import bleu_tokenize_for, score
from seq2seq.evaluation.word_links import whitespace_spans, word_links
from seq2seq.heads import masked
from seq2seq.inference import Loaded, load_for_inference, search_settings
from seq2seq.tokenization import EOS_ID, UNK_ID

SPLITS = ("validation", "test", "probes")
MAX_BEAM = 16
MAX_EXAMPLES = 200
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")  # sentencepiece's byte fallback
WORD_START = "\u2581"  # sentencepiece's word boundary, alone a piece before a byte-spelt word
DIGITS = 6  # the head grids' weights are rounded to this many decimals (the reading is not)


class RequestError(ValueError):
    """A request the explorer cannot answer; its message is the one line the client shows."""


@dataclass(frozen=True)
class Head:
    """One attention head: kind (encoder | decoder | cross), layer and head, from 0."""

    kind: str
    layer: int
    head: int


class Column:
    """One checkpoint, one column of the page.

    Args:
        index: its position in the explorer's list.
        loaded: the checkpoint, loaded for inference (weights only).
    """

    def __init__(self, index: int, loaded: Loaded) -> None:
        self.index, self.loaded = index, loaded
        self.lock = threading.Lock()
        cfg = loaded.config
        self.model_name = str(cfg.model.name)
        path = loaded.checkpoint
        self.label = f"{self.model_name} · {path.parent.parent.name}/{path.name}"
        self.is_transformer = hasattr(loaded.model, "decoder_layers")
        self.layers = ({"encoder": len(loaded.model.encoder_layers),
                        "decoder": len(loaded.model.decoder_layers),
                        "cross": len(loaded.model.decoder_layers)}
                       if self.is_transformer else {})
        self.num_heads = int(cfg.model.num_heads) if self.is_transformer else 0
        self.bleu_tokenize = bleu_tokenize_for(str(cfg.data.tgt_lang),
                                               cfg.data.get("bleu_tokenize"))
        self._examples: dict[str, list[dict[str, str]]] = {}

    def describe(self) -> dict[str, Any]:
        cfg = self.loaded.config
        return {"id": self.index, "label": self.label, "model": self.model_name,
                "src_lang": str(cfg.data.src_lang), "tgt_lang": str(cfg.data.tgt_lang),
                "corpus": str(cfg.data.name), "step": self.loaded.step,
                "has_attention": self.model_name != "vanilla", "layers": self.layers,
                "heads": self.num_heads, "beam_size": int(cfg.decoding.beam_size),
                "max_src_pieces": int(cfg.tokenizer.max_src_len) - 1}

    def check_heads(self, mask: Sequence[Head]) -> list[tuple[str, int, int]]:
        """`mask` as the heads report's (kind, layer, head) triples; RequestError when a head
        is not the model's."""
        if mask and not self.is_transformer:
            raise RequestError(f"the {self.model_name} model has no attention heads to mask")
        for head in mask:
            if head.kind not in KINDS:
                raise RequestError(f"head kind {head.kind!r} is not one of {', '.join(KINDS)}")
            layers = self.layers[head.kind]
            if not 0 <= head.layer < layers:
                raise RequestError(f"{head.kind} layer {head.layer} is out of range: the model "
                                   f"has layers 0 to {layers - 1}")
            if not 0 <= head.head < self.num_heads:
                raise RequestError(f"{head.kind} layer {head.layer} head {head.head} is out of "
                                   f"range: each layer has heads 0 to {self.num_heads - 1}")
        return [(head.kind, head.layer, head.head) for head in mask]

    def examples(self, split: str) -> list[dict[str, str]]:
        """Up to MAX_EXAMPLES sentences of the checkpoint's corpus with their references:
        validation or test pairs spread over the split, or the probe sentences."""
        if split not in SPLITS:
            raise RequestError(f"split {split!r} is not one of {', '.join(SPLITS)}")
        if split not in self._examples:
            data = self.loaded.config.data
            if split == "probes":
                probes = [str(p) for p in data.probe]
                references = [str(data.probe_reference or "")] + [""] * (len(probes) - 1)
                found = [{"source": p, "reference": r}
                         for p, r in zip(probes, references, strict=False)]
            else:
                try:
                    with self.lock:  # a first build is long and must not run twice
                        rows = load_source(data)[split]
                except Exception as err:  # a corpus that cannot be built here: say why
                    raise RequestError(f"the {data.name} corpus is not at hand "
                                       f"({str(err).splitlines()[0]})") from None
                step = max(1, len(rows) // MAX_EXAMPLES)
                found = [{"source": rows[i]["src"], "reference": rows[i]["tgt"]}
                         for i in range(0, len(rows), step)][:MAX_EXAMPLES]
            self._examples[split] = found
        return self._examples[split]


class Explorer:
    """The checkpoints the server was started with, and the requests on them.

    Args:
        checkpoints: the checkpoint files, one column each, in order.
        device: where the models run.
    """

    def __init__(self, checkpoints: Sequence[str | Path], device: torch.device) -> None:
        self.columns = [Column(i, load_for_inference(path, device))
                        for i, path in enumerate(checkpoints)]
        self.lock = threading.Lock()

    def column(self, index: int) -> Column:
        if not 0 <= index < len(self.columns):
            raise RequestError(f"model {index} is not one of the {len(self.columns)} "
                               f"checkpoint(s) loaded (0 to {len(self.columns) - 1})")
        return self.columns[index]

    def translate(self, index: int, text: str, beam_size: int = 1, nbest: int = 1,
                  target: str | None = None, reference: str | None = None,
                  mask: Sequence[Head] = ()) -> dict[str, Any]:
        """One checkpoint's translation of `text` and the attention that made it.

        Args:
            index: the checkpoint.
            text: the source sentence.
            beam_size: 1 is greedy.
            nbest: hypotheses returned (at most `beam_size`).
            target: teacher-force the attention on this text instead of the best hypothesis.
            reference: scores the translation (sentence BLEU and chrF) when given.
            mask: heads whose outputs are zeroed (a Transformer's).

        Returns:
            {"hypotheses": [{text, score}], "seconds", "notice" (a truncation, or None),
            "target" (the text the attention is read on), "attention" (see `attention`),
            "scores" ({bleu, chrf} or None), "unmasked" (with a mask: the translation and
            scores without it)}.

        Raises:
            RequestError: an empty or over-long request, a target that does not tokenize,
                a beam size out of range, a head the model does not have.
        """
        column = self.column(index)
        loaded, tok = column.loaded, column.loaded.tokenizer
        text = " ".join(text.split())
        if not text:
            raise RequestError("the sentence is empty: type a sentence to translate")
        if not 1 <= beam_size <= MAX_BEAM:
            raise RequestError(f"beam size {beam_size} is out of range: 1 (greedy) to {MAX_BEAM}")
        if not 1 <= nbest <= beam_size:
            raise RequestError(f"n-best {nbest} is out of range: 1 to the beam size ({beam_size})")
        heads = column.check_heads(mask)
        ids = tok.encode_src([text])[0]
        limit = int(loaded.config.tokenizer.max_src_len)
        notice = None
        if len(ids) >= limit:
            notice = (f"{len(ids)} source pieces ({len(text.split())} words) is longer than the "
                      f"model allows; translated its first {limit - 1} pieces "
                      f"(tokenizer.max_src_len={limit})")
            ids = ids[: limit - 1]
        forced = None if target is None else " ".join(target.split())
        if forced is not None:
            forced_ids = tok.encode_tgt([forced])[0]
            check_target(forced, forced_ids, tok.tgt_pieces(forced_ids))
            target_limit = int(loaded.config.tokenizer.max_tgt_len)
            if len(forced_ids) >= target_limit:
                cut = (f"the target has {len(forced_ids)} pieces, more than the model reads; "
                       f"its words past piece {target_limit - 1} get no attention "
                       f"(tokenizer.max_tgt_len={target_limit})")
                notice = cut if notice is None else f"{notice}; {cut}"
        settings = search_settings(loaded.config, beam_size, 1, nbest)
        with self.lock:
            started = time.perf_counter()
            with masked(loaded.model, heads):
                hyps = decode_ids(loaded.model, [ids], settings, loaded.device)[0]
                seconds = time.perf_counter() - started
                texts = [one_line(tok.decode_tgt(h.tokens)) for h in hyps]
                read_on = forced if forced is not None else texts[0]
                attention = (self.attention(column, text, read_on) if read_on else None)
            unmasked = None
            if heads:
                plain = decode_ids(loaded.model, [ids], settings, loaded.device)[0][0]
                unmasked = {"text": one_line(tok.decode_tgt(plain.tokens))}
        scores = None
        if reference:
            scores = sentence_scores(texts[0], reference, column.bleu_tokenize)
            if unmasked is not None:
                unmasked["scores"] = sentence_scores(unmasked["text"], reference,
                                                     column.bleu_tokenize)
        return {"model": index, "hypotheses": [{"text": t, "score": h.score}
                                               for t, h in zip(texts, hyps, strict=True)],
                "seconds": seconds, "notice": notice, "target": read_on,
                "attention": attention, "scores": scores, "unmasked": unmasked,
                "mask": [list(head) for head in heads]}

    def attention(self, column: Column, source: str, target: str) -> dict[str, Any] | None:
        """The attention of `column`'s model on (source, target), teacher-forced, or None for a
        model without attention (vanilla: every step reads one fixed context).

        Returns:
            {"reading": what is read, in words; "src_pieces", "tgt_pieces" (EOS last);
            "src_words", "tgt_words"; "src_piece_words", "tgt_piece_words" (the words each
            piece overlaps); "pieces": (T, S) the reading `align` reads; "words": (Tw, Sw + 1)
            that reading over words, EOS last (as the AER metric reads it); "links": [[i, j]]
            source word i - target word j; and for a Transformer "heads": {"cross":
            [L][H][T][S], "encoder": [L][H][S][S], "decoder": [L][H][T][T]}}.
        """
        loaded = column.loaded
        if column.model_name == "vanilla":
            return None
        found = teacher_forced_attention(loaded, [source], [target], ("source", "target"),
                                         verbose=False)
        src_ids, tgt_ids = found.src_ids[0], found.tgt_ids[0]
        src_spans, tgt_spans = found.src_spans[0], found.tgt_spans[0]
        matrix = found.attention[0]
        tok = loaded.tokenizer
        src_words, tgt_words = whitespace_spans(source), whitespace_spans(target)
        src_owners, tgt_owners = piece_words(src_spans, src_words), piece_words(tgt_spans,
                                                                                tgt_words)
        words = word_attention(matrix, src_owners, tgt_owners, len(src_words), len(tgt_words))
        links = word_links(matrix, source, target, src_spans, tgt_spans, found.reading.shift)
        eos = tok.tgt_pieces([EOS_ID])[0]
        result: dict[str, Any] = {
            "reading": found.reading.description,
            "src_pieces": tok.src_pieces(src_ids) + [eos],
            "tgt_pieces": tok.tgt_pieces(tgt_ids) + [eos],
            "src_words": [source[a:b] for a, b in src_words],
            "tgt_words": [target[a:b] for a, b in tgt_words],
            "src_piece_words": src_owners, "tgt_piece_words": tgt_owners,
            "pieces": matrix.tolist(), "words": words.tolist(),
            "links": sorted([i, j] for i, j in links),
        }
        if column.is_transformer:
            batch = collate([src_ids], [tgt_ids], [0]).to(loaded.device)
            with eval_mode(loaded.model), torch.inference_mode():
                cross = loaded.model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)
                encoder, decoder = loaded.model.self_attention(batch.src, batch.src_mask,
                                                               batch.tgt_in)
            result["heads"] = {"cross": _grid(cross), "encoder": _grid(encoder),
                               "decoder": _grid(decoder)}
        return result


def _grid(weights: Tensor) -> list:
    """(L, 1, H, Q, K) -> [L][H][Q][K] floats, rounded to DIGITS decimals."""
    return torch.round(weights[:, 0].float().cpu(), decimals=DIGITS).tolist()


def check_target(text: str, ids: list[int], pieces: list[str]) -> None:
    """RequestError unless the target `text` tokenizes: into pieces of the vocabulary, not
    only the unknown piece or byte-fallback bytes (a text in a script the model never saw)."""
    if not text:
        raise RequestError("the target is empty: type the translation to read the attention on")
    known = [piece for i, piece in zip(ids, pieces, strict=True)
             if i != UNK_ID and piece != WORD_START and not BYTE_PIECE.fullmatch(piece)]
    if not known:
        raise RequestError(f"the target does not tokenize: the model's target vocabulary has no "
                           f"piece of {text!r} (only unknown or byte pieces)")


def sentence_scores(hypothesis: str, reference: str, tokenize: str) -> dict[str, float]:
    """Sentence BLEU and chrF (sacrebleu, the checkpoint's BLEU tokenizer)."""
    found = score([hypothesis], [reference], tokenize)
    return {"bleu": found.bleu, "chrf": found.chrf}


