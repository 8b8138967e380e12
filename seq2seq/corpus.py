"""The corpus as the models see it: text splits, the tokenizer, and piece ids.

Shared by `prepare`, `train`, `evaluate` and the benchmark so they all read the same data the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from seq2seq.alignment import Links, corpus_links
from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import clean_corpus, data_root, load_corpus, load_source
from seq2seq.data.export import corpus_fingerprint, write_export
from seq2seq.errors import UserError
from seq2seq.fonts import fonts_for
from seq2seq.tokenization import Tokenizer, build_tokenizer

SPLITS = ("train", "validation", "test")


@dataclass
class EncodedSplit:
    """One split as text and as piece ids (no BOS/EOS: the batcher adds them); row i of each
    list is the same pair."""

    src_text: list[str]
    tgt_text: list[str]
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    truncated: int = 0  # decoding splits: pairs cut to the maximum length
    dropped: int = 0  # training splits: pairs over the maximum length, left out
    # decoding splits of a corpus drawn by document: each pair's document (the unit the
    # length study's bootstrap resamples); None where pairs were drawn one by one
    documents: list[str] | None = None
    # each pair's domain where the corpus stored one (data=debian_en_ko), else None
    domains: list[str] | None = None

    def __len__(self) -> int:
        return len(self.src_ids)

    @property
    def src_lens(self) -> list[int]:
        return [len(ids) for ids in self.src_ids]

    @property
    def tgt_lens(self) -> list[int]:
        return [len(ids) for ids in self.tgt_ids]

    def spread(self, n: int | None) -> list[int]:
        """The indices of `n` pairs spread evenly over the split (all pairs when `n` is None or
        not smaller): a subset with the mix of the whole split, whose order may group its
        sources or documents (the documentation corpus lists them one after another)."""
        if n is None or n >= len(self):
            return list(range(len(self)))
        return [i * len(self) // n for i in range(n)]

    def subset(self, indices: list[int]) -> EncodedSplit:
        """The pairs at `indices`, in that order."""
        return EncodedSplit([self.src_text[i] for i in indices],
                            [self.tgt_text[i] for i in indices],
                            [self.src_ids[i] for i in indices],
                            [self.tgt_ids[i] for i in indices],
                            documents=None if self.documents is None
                            else [self.documents[i] for i in indices],
                            domains=None if self.domains is None
                            else [self.domains[i] for i in indices])


@dataclass
class PreparedData:
    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit] = field(default_factory=dict)
    # reference word links of the validation and test pairs (seq2seq.alignment); None when the
    # aligner is unavailable
    links: dict[str, list[Links]] | None = None
    # the corpus's sha256 over its cleaned splits and document ids (seq2seq.data.export)
    fingerprint: str = ""
    # (source text, target text) -> the training pair's reference links, for guided alignment
    # (prepare_data's train_links); None when not asked for or the aligner is unavailable
    train_links: dict[tuple[str, str], Links] | None = None


def encode_split(
    tokenizer: Tokenizer,
    src: list[str],
    tgt: list[str],
    max_src_len: int,
    max_tgt_len: int,
    *,
    train: bool = False,
    documents: list[str] | None = None,
    domains: list[str] | None = None,
) -> EncodedSplit:
    """Encode a split, keeping room for the EOS (and BOS) the batcher adds: see `fitted_split`
    for what happens to a longer pair (`train`: dropped; else cut). `documents` and `domains`
    (each pair's, see `documents_of`, `domains_of`) are kept for a decoding split."""
    split = fitted_split(
        list(src), list(tgt), tokenizer.encode_src(src), tokenizer.encode_tgt(tgt),
        max_src_len, max_tgt_len, train=train,
    )
    if not train and documents is not None:
        split.documents = list(documents)
    if not train and domains is not None:
        split.domains = list(domains)
    return split


def documents_of(rows: datasets.Dataset) -> list[str] | None:
    """Each pair's document where the corpus names them (its `document` column), else None."""
    return list(rows["document"]) if "document" in rows.column_names else None


def domains_of(rows: datasets.Dataset) -> list[str] | None:
    """Each pair's domain where the corpus stored them (its `domain` column), else None."""
    return list(rows["domain"]) if "domain" in rows.column_names else None


def fits(src_ids: list[int], tgt_ids: list[int], max_src_len: int, max_tgt_len: int) -> bool:
    """Whether a pair's ids leave room for the EOS (and BOS) the batcher adds."""
    return len(src_ids) < max_src_len and len(tgt_ids) < max_tgt_len


def fitted_split(
    src: list[str],
    tgt: list[str],
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    max_src_len: int,
    max_tgt_len: int,
    *,
    train: bool,
) -> EncodedSplit:
    """The split with every pair fitting the maximum lengths (see `fits`).

    A training pair that does not fit is dropped whole, texts and ids (counted in `dropped`):
    cut on both sides, it would pair a partial source with a partial target that ends in EOS.
    A validation or test pair is kept and cut to fit, in place (counted in `truncated`): the
    model decodes the cut source, and the reference is scored as text, whole.
    """
    if train:
        keep = [i for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True))
                if fits(s, t, max_src_len, max_tgt_len)]
        return EncodedSplit(
            [src[i] for i in keep], [tgt[i] for i in keep],
            [src_ids[i] for i in keep], [tgt_ids[i] for i in keep],
            dropped=len(src_ids) - len(keep),
        )
    truncated = 0
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if not fits(s, t, max_src_len, max_tgt_len):
            truncated += 1
            src_ids[i], tgt_ids[i] = s[: max_src_len - 1], t[: max_tgt_len - 1]
    return EncodedSplit(src, tgt, src_ids, tgt_ids, truncated=truncated)


class SegmentationSampler:
    """Subword regularization (Kudo, 2018), reproducible: each epoch segments every training
    text anew, drawing one of its `nbest` best unigram segmentations with probability
    proportional to P(segmentation)^alpha (smaller alpha: more varied pieces).

    The draws come from numpy seeded with (seed, epoch), so every process of a DDP run and a
    resumed run see the same pieces. (sentencepiece's own sampler cannot promise that: its
    random generator differs from one process to the next whatever seed it is given.)

    A drawn segmentation of a pair that leaves no room for EOS/BOS (more pieces than the best
    one) is replaced by the pair's segmentation in `split`, the prepared training split, whose
    pairs all fit: every epoch trains on the same pairs, none of them cut.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        split: EncodedSplit,
        alpha: float,
        nbest: int,
        max_src_len: int,
        max_tgt_len: int,
    ) -> None:
        if tokenizer.type != "unigram":
            raise UserError(
                f"trainer.subword_alpha samples unigram segmentations; tokenizer.type is "
                f"{tokenizer.type} (use tokenizer=unigram or trainer.subword_alpha=null)"
            )
        self.split, self.alpha = split, alpha
        self.max_src_len, self.max_tgt_len = max_src_len, max_tgt_len
        self.sides = [
            self._table(tokenizer.nbest_src(split.src_text, nbest)),
            self._table(tokenizer.nbest_tgt(split.tgt_text, nbest)),
        ]

    @staticmethod
    def _table(nbest: list[tuple[list[list[int]], list[float]]]) -> tuple[list, np.ndarray]:
        """The candidates, and their scores as an (N, n) array, -inf where a text has fewer."""
        width = max(len(scores) for _, scores in nbest)
        scores = np.full((len(nbest), width), -np.inf)
        for i, (_, row) in enumerate(nbest):
            scores[i, : len(row)] = row
        return [candidates for candidates, _ in nbest], scores

    def sample(self, seed: int, epoch: int) -> EncodedSplit:
        """The training split segmented for `epoch`."""
        rng = np.random.default_rng([seed, epoch])
        chosen = []
        for candidates, scores in self.sides:
            logits = self.alpha * (scores - scores[:, :1])  # the best first: no overflow
            probs = np.exp(logits)
            cumulative = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
            draws = (cumulative < rng.random((len(candidates), 1))).sum(axis=1)
            picks = np.minimum(draws, (scores > -np.inf).sum(axis=1) - 1)
            chosen.append([list(c[k]) for c, k in zip(candidates, picks.tolist(), strict=True)])
        src_ids, tgt_ids = chosen
        best = self.split
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
            if not fits(s, t, self.max_src_len, self.max_tgt_len):
                src_ids[i], tgt_ids[i] = best.src_ids[i], best.tgt_ids[i]
        # drops nothing when `split` is the prepared training split
        return fitted_split(best.src_text, best.tgt_text, src_ids, tgt_ids,
                            self.max_src_len, self.max_tgt_len, train=True)


def prepare_data(
    data: DataConfig, tok: TokenizerConfig, verbose: bool = True,
    tokenizer: Tokenizer | None = None, train_links: bool = False,
) -> PreparedData:
    """Build (or reuse) the corpus, the tokenizer and the reference word links, then encode
    every split. A `tokenizer` given (a fine-tuned checkpoint's) encodes it instead: none is
    trained or read from the cache. `train_links`: also keep the training pairs' links
    (guided alignment).

    Training pairs over tokenizer.max_src_len/max_tgt_len pieces are dropped; validation and
    test pairs are kept, cut to fit (see `fitted_split`). `verbose` prints how many.
    """
    corpus = load_corpus(data)
    root = data_root(data.root)
    fonts_for((data.src_lang, data.tgt_lang), root / "raw")  # heatmap labels need the glyphs
    if tokenizer is None:
        tokenizer = build_tokenizer(
            corpus, root / "tokenizers" / data.name, type=tok.type, vocab_size=tok.vocab_size,
            joint=tok.joint, character_coverage=tok.character_coverage,
            input_sentence_size=tok.input_sentence_size, src_lang=data.src_lang,
            tgt_lang=data.tgt_lang,
        )
    texts = {split: (corpus[split]["src"], corpus[split]["tgt"]) for split in SPLITS}
    links = corpus_links(texts, root, data.name, verbose,
                         splits=("train", "validation", "test") if train_links
                         else ("validation", "test"))
    prepared = PreparedData(
        tokenizer, links=None if links is None else {s: links[s] for s in ("validation", "test")},
        fingerprint=corpus_fingerprint(corpus))
    if links is not None and train_links:
        prepared.train_links = dict(zip(zip(*texts["train"], strict=True), links["train"],
                                        strict=True))
    limits = f"tokenizer.max_src_len/max_tgt_len ({tok.max_src_len}/{tok.max_tgt_len}) pieces"
    for split in SPLITS:
        rows = corpus[split]
        encoded = prepared.splits[split] = encode_split(
            tokenizer, rows["src"], rows["tgt"], tok.max_src_len, tok.max_tgt_len,
            train=split == "train", documents=documents_of(rows), domains=domains_of(rows),
        )
        if split == "train" and len(encoded) == 0:
            raise UserError(f"corpus {data.name}: no training pair fits {limits}")
        if verbose and encoded.dropped:
            print(f"{split}: {encoded.dropped:,} pairs dropped: over {limits}")
        if verbose and encoded.truncated:
            print(f"{split}: {encoded.truncated:,} pairs cut to {limits} for decoding "
                  "(references stay whole)")
    return prepared


def export_corpus(data: DataConfig, out: Path) -> dict[str, Any]:
    """Write the corpus `data` names, as `prepare_data` built it, to the folder `out` (see
    seq2seq.data.export): its pairs before cleaning, the tokenizers cached for its training
    split and its word alignments. Returns the manifest written."""
    pairs = load_source(data)
    corpus = clean_corpus(data, pairs, verbose=False)
    return write_export(data, pairs, corpus, data_root(data.root), out)
