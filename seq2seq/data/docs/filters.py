"""The pair filter, the document split and the held-out cleanup (../../../../shared/DATA.md).

Filter, in this order, each pair counted under the first rule it fails:
- empty: a side is empty after normalising whitespace;
- identical: both sides are the same text;
- short: the English side has fewer than 3 words;
- ratio: the German side's character length over the English side's is above 2.5 or below 0.4;
- untranslated: more than 60% of the German side's words occur in the English side;
- duplicate: the same (German, English) pair came earlier (in any source).
Split: a pair goes where its document goes, by `md5(document) % 100` (documents, not lines,
because documentation repeats its boilerplate). Then every validation or test pair whose
German or English side occurs in train is removed, so neither direction sees a held-out
source sentence (or reference) in training.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from seq2seq.data.docs.segments import Segment

SPLITS = ("train", "validation", "test")
DROP_REASONS = ("empty", "identical", "short", "ratio", "untranslated", "duplicate")
MIN_EN_WORDS = 3
MAX_CHAR_RATIO = 2.5
MIN_CHAR_RATIO = 0.4
MAX_SHARED_WORDS = 0.6
TEST_BUCKETS = 4  # md5 % 100 below this: test (about 4% of the documents)
VALIDATION_BUCKETS = 3  # the next buckets: validation
_WORD = re.compile(r"\w+")


def shared_word_share(de: str, en: str) -> float:
    """The share of the German side's words (lowercased `\\w+` runs) found in the English side."""
    de_words = _WORD.findall(de.lower())
    if not de_words:
        return 1.0
    en_words = set(_WORD.findall(en.lower()))
    return sum(word in en_words for word in de_words) / len(de_words)


def drop_reason(de: str, en: str) -> str | None:
    """The first rule (all but duplicate) that a normalised pair fails, or None to keep it."""
    if not de or not en:
        return "empty"
    if de == en:
        return "identical"
    if len(en.split()) < MIN_EN_WORDS:
        return "short"
    if not MIN_CHAR_RATIO <= len(de) / len(en) <= MAX_CHAR_RATIO:
        return "ratio"
    if shared_word_share(de, en) > MAX_SHARED_WORDS:
        return "untranslated"
    return None


def filter_segments(
    segments: Iterable[Segment], seen: set[tuple[str, str]]
) -> tuple[list[Segment], dict[str, int]]:
    """Keep the segments that pass the filter and were not seen before.

    Args:
        segments: normalised segments of one source.
        seen: the (de, en) pairs kept so far from every source; the kept pairs are added.

    Returns:
        The kept segments in order, and the number dropped per reason (DROP_REASONS).
    """
    kept = []
    dropped = dict.fromkeys(DROP_REASONS, 0)
    for segment in segments:
        reason = drop_reason(segment.de, segment.en)
        if reason is None and (segment.de, segment.en) in seen:
            reason = "duplicate"
        if reason is None:
            seen.add((segment.de, segment.en))
            kept.append(segment)
        elif reason != "empty" or segment.de or segment.en:
            dropped[reason] += 1  # blocks empty on both sides are structure, not pairs
    return kept, dropped


def split_of_document(document: str) -> str:
    """The split of every pair of `document`, from `md5(document) % 100`."""
    digest = hashlib.md5(document.encode("utf-8"), usedforsecurity=False).hexdigest()
    bucket = int(digest, 16) % 100
    if bucket < TEST_BUCKETS:
        return "test"
    if bucket < TEST_BUCKETS + VALIDATION_BUCKETS:
        return "validation"
    return "train"


def remove_train_overlap(splits: dict[str, list[Segment]]) -> dict[str, int]:
    """Remove from validation and test (in place) every pair with a side that occurs in train.

    Returns:
        The number of pairs removed per held-out split.
    """
    train_de = {segment.de for segment in splits["train"]}
    train_en = {segment.en for segment in splits["train"]}
    removed = {}
    for name in ("validation", "test"):
        kept = [s for s in splits[name] if s.de not in train_de and s.en not in train_en]
        removed[name] = len(splits[name]) - len(kept)
        splits[name] = kept
    return removed
