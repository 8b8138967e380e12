"""Cleaning rules for a training split (valid and test are never cleaned).

These rules count words. The limits in pieces come after tokenization: `seq2seq.corpus` drops
the training pairs over tokenizer.max_src_len/max_tgt_len and reports their number after this
cleaning report.
"""

from __future__ import annotations

from collections.abc import Sequence

DROP_REASONS = ("empty", "too_long", "ratio")


def clean_pairs(
    src: Sequence[str], tgt: Sequence[str], *, max_words: int, max_ratio: float
) -> tuple[list[int], dict[str, int]]:
    """Choose the training pairs to keep.

    A pair is dropped when either side is empty (after stripping whitespace), when either side
    has more than `max_words` whitespace-separated words, or when both sides have more than 3
    words and the longer has more than `max_ratio` times the words of the shorter.

    Args:
        src: source sentences.
        tgt: target sentences, aligned with `src`.
        max_words: the most words a side may have.
        max_ratio: the largest allowed word-count ratio between the sides.

    Returns:
        The indices of the kept pairs in order, and the number dropped per reason
        (keys: empty, too_long, ratio; each pair counts under its first failing rule).
    """
    keep: list[int] = []
    dropped = dict.fromkeys(DROP_REASONS, 0)
    for index, (src_text, tgt_text) in enumerate(zip(src, tgt, strict=True)):
        src_words = len(src_text.split())
        tgt_words = len(tgt_text.split())
        if src_words == 0 or tgt_words == 0:
            dropped["empty"] += 1
        elif src_words > max_words or tgt_words > max_words:
            dropped["too_long"] += 1
        elif (
            src_words > 3
            and tgt_words > 3
            and max(src_words, tgt_words) > max_ratio * min(src_words, tgt_words)
        ):
            dropped["ratio"] += 1
        else:
            keep.append(index)
    return keep, dropped
