"""The corpus as the models see it: text splits, the tokenizer, and piece ids.

Shared by `prepare`, `train`, `evaluate` and the benchmark so they all read the same data the
same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import data_root, load_corpus
from seq2seq.errors import UserError
from seq2seq.tokenization import Tokenizer, build_tokenizer

SPLITS = ("train", "validation", "test")


@dataclass
class EncodedSplit:
    """One split as text and as piece ids (no BOS/EOS: the batcher adds them)."""

    src_text: list[str]
    tgt_text: list[str]
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    truncated: int = 0  # pairs cut to the maximum length

    def __len__(self) -> int:
        return len(self.src_ids)

    @property
    def src_lens(self) -> list[int]:
        return [len(ids) for ids in self.src_ids]

    @property
    def tgt_lens(self) -> list[int]:
        return [len(ids) for ids in self.tgt_ids]


@dataclass
class PreparedData:
    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit] = field(default_factory=dict)


def encode_split(
    tokenizer: Tokenizer, src: list[str], tgt: list[str], max_src_len: int, max_tgt_len: int
) -> EncodedSplit:
    """Encode a split, keeping room for the EOS (and BOS) the batcher adds."""
    return fitted_split(
        list(src), list(tgt), tokenizer.encode_src(src), tokenizer.encode_tgt(tgt),
        max_src_len, max_tgt_len,
    )


def fitted_split(
    src: list[str],
    tgt: list[str],
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    max_src_len: int,
    max_tgt_len: int,
) -> EncodedSplit:
    """The split with each pair whose ids leave no room for EOS/BOS cut to fit (in place)."""
    truncated = 0
    for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        if len(s) >= max_src_len or len(t) >= max_tgt_len:
            truncated += 1
            src_ids[i], tgt_ids[i] = s[: max_src_len - 1], t[: max_tgt_len - 1]
    return EncodedSplit(src, tgt, src_ids, tgt_ids, truncated)


class SegmentationSampler:
    """Subword regularization (Kudo, 2018), reproducible: each epoch segments every training
    text anew, drawing one of its `nbest` best unigram segmentations with probability
    proportional to P(segmentation)^alpha (smaller alpha: more varied pieces).

    The draws come from numpy seeded with (seed, epoch), so every process of a DDP run and a
    resumed run see the same pieces. (sentencepiece's own sampler cannot promise that: its
    random generator differs from one process to the next whatever seed it is given.)
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
        return fitted_split(self.split.src_text, self.split.tgt_text, src_ids, tgt_ids,
                            self.max_src_len, self.max_tgt_len)


def prepare_data(data: DataConfig, tok: TokenizerConfig, verbose: bool = True) -> PreparedData:
    """Build (or reuse) the corpus and the tokenizer, then encode every split."""
    corpus = load_corpus(data)
    cache_dir = data_root(data.root) / "tokenizers" / data.name
    tokenizer = build_tokenizer(
        corpus,
        cache_dir,
        type=tok.type,
        vocab_size=tok.vocab_size,
        joint=tok.joint,
        character_coverage=tok.character_coverage,
        input_sentence_size=tok.input_sentence_size,
        src_lang=data.src_lang,
        tgt_lang=data.tgt_lang,
    )
    prepared = PreparedData(tokenizer)
    for split in SPLITS:
        rows = corpus[split]
        prepared.splits[split] = encode_split(
            tokenizer, rows["src"], rows["tgt"], tok.max_src_len, tok.max_tgt_len
        )
        if verbose and prepared.splits[split].truncated:
            print(f"{split}: {prepared.splits[split].truncated} pairs truncated to the max length")
    return prepared
