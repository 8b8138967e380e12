"""Held-out pairs with a twin in train: find them, count them, remove them.

A validation or test pair leaks when a side of it, or something very close to it, was seen in
training. Three rules, each looser than the one before, and a pair counts under the first it
meets (on either side, each against the train side of the same language):
- exact: the side equals a train side;
- normalised: it equals a train side after `normalise` (NFKC, casefold; punctuation, symbols,
  digits and whitespace removed): "Update links when loading" and "Update Links when Loading";
- near: its character similarity to a train side is at least NEAR_SIMILARITY, where the
  similarity of a and b is 2 * LCS(a, b) / (len(a) + len(b)) over their casefolded NFKC forms
  (rapidfuzz's `fuzz.ratio`, difflib's ratio with the longest common subsequence in place of
  matching blocks, so never below difflib's): "URL der Präsentation:" and "URL der Präsentation".
The near search only scores strings whose lengths and character counts can reach the threshold
(`TwinIndex`), so a corpus of 70k training pairs is checked in seconds, exactly.

A corpus whose build removed the twins by these rules reports 0 under each of them by
construction; the report also counts, as a diagnostic removing nothing, the held-out pairs with
a side at similarity LOOSE_SIMILARITY or more to a train side ("loose"), which finds the
paraphrases and templated strings the three rules let through.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np
from rapidfuzz import fuzz, process

RULES = ("exact", "normalised", "near")
NEAR_SIMILARITY = 0.9
LOOSE_SIMILARITY = 0.8  # the diagnostic's threshold: looser than the removal's
FINE_BUCKETS = 128  # character count buckets of the near search
COARSE_BUCKETS = 16
_NOT_LETTERS = re.compile(r"[\W\d_]+")


def normalise(text: str) -> str:
    """NFKC, casefold, and every non-letter (punctuation, symbols, digits, whitespace) removed."""
    return _NOT_LETTERS.sub("", unicodedata.normalize("NFKC", text).casefold())


def similarity_form(text: str) -> str:
    """The form the near rule compares: NFKC and casefolded, whitespace runs made one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def similarity(a: str, b: str) -> float:
    """2 * LCS / (len(a) + len(b)) of the two similarity forms, in [0, 1]."""
    return fuzz.ratio(similarity_form(a), similarity_form(b)) / 100


class TwinIndex:
    """The train sides of one language, indexed for the three rules.

    The near search keeps, of the train sides whose length can reach the threshold, those whose
    character counts allow it: LCS(a, b) is at most the sum over characters of the smaller of
    their two counts, and stays so when characters are pooled into buckets (coarse first, then
    finer), so no twin is skipped; rapidfuzz scores what is left.

    Args:
        texts: the train sides.
        near_similarity: the threshold of the near rule.
    """

    def __init__(self, texts: Iterable[str], near_similarity: float = NEAR_SIMILARITY) -> None:
        texts = set(texts)
        self.near_similarity = near_similarity
        self._exact = texts
        self._normalised = {normalise(text) for text in texts} - {""}
        self._forms = sorted({similarity_form(text) for text in texts}, key=len)
        self._lengths = np.array([len(form) for form in self._forms], dtype=np.int64)
        fine = _char_counts(self._forms, FINE_BUCKETS)
        self._fine = fine
        self._coarse = _pool(fine, COARSE_BUCKETS)

    def rule(self, text: str) -> str | None:
        """The first rule by which `text` has a twin here, or None."""
        if text in self._exact:
            return "exact"
        key = normalise(text)
        if key and key in self._normalised:
            return "normalised"
        if self.near_twin(text) is not None:
            return "near"
        return None

    def near_twin(self, text: str) -> str | None:
        """The most similar train side (in similarity form) at the near threshold, or None."""
        form = similarity_form(text)
        s = self.near_similarity
        # 2 * LCS / (m + n) >= s needs n within [m * s / (2 - s), m * (2 - s) / s]
        low = int(np.searchsorted(self._lengths, math.ceil(len(form) * s / (2 - s) - 1e-9)))
        high = int(np.searchsorted(self._lengths, math.floor(len(form) * (2 - s) / s + 1e-9),
                                   side="right"))
        if low >= high:
            return None
        fine = _char_counts([form], FINE_BUCKETS)[0]
        candidates = np.arange(low, high)
        for counts, query in ((self._coarse, _pool(fine[None], COARSE_BUCKETS)[0]),
                              (self._fine, fine)):
            bound = np.minimum(counts[candidates], query).sum(axis=1)
            candidates = candidates[2 * bound >= s * (len(form) + self._lengths[candidates])]
            if not len(candidates):
                return None
        found = process.extractOne(form, [self._forms[i] for i in candidates], scorer=fuzz.ratio,
                                   score_cutoff=100 * s, processor=None)
        return None if found is None else found[0]


def _char_counts(texts: Sequence[str], buckets: int) -> np.ndarray:
    """(len(texts), buckets) counts of each text's characters, pooled by code point % buckets."""
    codes = [np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) % buckets for text in texts]
    rows = np.repeat(np.arange(len(texts)), [len(c) for c in codes])
    flat = rows * buckets + (np.concatenate(codes) if codes else np.zeros(0, np.uint32))
    counts = np.bincount(flat.astype(np.int64), minlength=len(texts) * buckets)
    return counts.reshape(len(texts), buckets).astype(np.int32)


def _pool(counts: np.ndarray, buckets: int) -> np.ndarray:
    """Counts over FINE_BUCKETS pooled into `buckets`, a divisor (code point % buckets)."""
    return counts.reshape(len(counts), -1, buckets).sum(axis=1)


class PairTwins:
    """Both sides of the training pairs, each language indexed on its own.

    Args:
        train: the training pairs, (side 1, side 2) in a fixed order of languages.
    """

    def __init__(self, train: Sequence[tuple[str, str]],
                 near_similarity: float = NEAR_SIMILARITY) -> None:
        self._sides = tuple(TwinIndex((pair[side] for pair in train), near_similarity)
                            for side in (0, 1))

    def rule(self, pair: tuple[str, str]) -> str | None:
        """The first rule by which either side of `pair` has a twin in train, or None."""
        found = [index.rule(side) for index, side in zip(self._sides, pair, strict=True)]
        return next((rule for rule in RULES if rule in found), None)


def twin_rules(
    train: Sequence[tuple[str, str]], held_out: Sequence[tuple[str, str]]
) -> list[str | None]:
    """The rule (or None) of every held-out pair against the training pairs."""
    twins = PairTwins(list(train))
    return [twins.rule(pair) for pair in held_out]


def leakage_report(splits: dict[str, tuple[Sequence[str], Sequence[str]]]) -> dict[str, dict]:
    """For each held-out split, the pairs with a twin in train under each rule.

    Args:
        splits: train/validation/test -> (source sides, target sides).

    Returns:
        split -> {"pairs": n, "exact": n, "normalised": n, "near": n, "loose": n}, each pair
        counted under the first rule it meets; "loose": the pairs with a twin of any rule at
        LOOSE_SIMILARITY (the stricter ones included).
    """
    train = list(zip(*splits["train"], strict=True))
    twins, loose = PairTwins(train), PairTwins(train, LOOSE_SIMILARITY)
    report = {}
    for name in ("validation", "test"):
        pairs = list(zip(*splits[name], strict=True))
        rules = [twins.rule(pair) for pair in pairs]
        report[name] = {"pairs": len(rules), **{rule: rules.count(rule) for rule in RULES},
                        "loose": sum(loose.rule(pair) is not None for pair in pairs)}
    return report


def format_report(report: dict[str, dict]) -> list[str]:
    """One line per held-out split: its pairs and the twins per rule, with their shares."""
    lines = []
    for name, counts in report.items():
        total = max(counts["pairs"], 1)
        twins = ", ".join(f"{rule} {counts[rule]:,} ({counts[rule] / total:.1%})"
                          for rule in RULES)
        lines.append(f"  {name}: {counts['pairs']:,} pairs; with a twin in train: {twins}; "
                     f"diagnostic, similarity >= {LOOSE_SIMILARITY} (nothing removed): "
                     f"{counts['loose']:,} ({counts['loose'] / total:.1%})")
    return lines
