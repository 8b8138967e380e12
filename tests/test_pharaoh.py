"""Pharaoh word alignments (seq2seq.evaluation.pharaoh): gold sets with sure and possible links,
precision, recall and AER worked out by hand, and the symmetrisations link by link, checked
against atools' grow-diag-final on hand-made matrices."""

from __future__ import annotations

from pathlib import Path

import pytest

from seq2seq.alignment import Links
from seq2seq.errors import UserError
from seq2seq.evaluation.pharaoh import (
    SYMMETRIZATIONS,
    format_links,
    grow_diag_final,
    intersection,
    read_gold,
    score_links,
    union,
)


def links(*pairs: tuple[int, int]) -> frozenset[tuple[int, int]]:
    return frozenset(pairs)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_gold_set_marks_sure_and_possible_links_both_ways(tmp_path: Path) -> None:
    """`i-j` sure, `i?j` and `ipj` possible; a possible file adds its links (whatever their
    mark) to the possible ones; a sure link is possible too."""
    gold = write(tmp_path / "gold", "0-0 1-1 2p2 3?3\n0-0\n\n")
    possible = write(tmp_path / "possible", "\n1-0 0p1\n2?1\n")
    found = read_gold(gold, possible, src_words=[4, 2, 3], tgt_words=[5, 2, 2])
    assert found[0] == Links(links((0, 0), (1, 1)), links((0, 0), (1, 1), (2, 2), (3, 3)))
    assert found[1] == Links(links((0, 0)), links((0, 0), (1, 0), (0, 1)))
    assert found[2] == Links(links(), links((2, 1)))  # an empty line: no sure link
    without = read_gold(gold, None, src_words=[4, 2, 3], tgt_words=[5, 2, 2])
    assert without[1] == Links(links((0, 0)), links((0, 0)))


def test_precision_recall_and_aer_of_a_hand_made_alignment(tmp_path: Path) -> None:
    """Pair 1: S = {0-0, 1-1}, P = S + {2-2, 3-3}, A = {0-0, 2-2, 3-4}: |A∩S| = 1, |A∩P| = 2.
    Pair 2: S = {0-0}, P = S + {1-0, 0-1}, A = {1-0, 1-1}: |A∩S| = 0, |A∩P| = 1.
    Over both: |A| = 5, |S| = 3, |A∩S| = 1, |A∩P| = 3, so P = 3/5, R = 1/3 and
    AER = 1 - (1 + 3) / (5 + 3) = 1/2."""
    gold = read_gold(write(tmp_path / "gold", "0-0 1-1 2p2 3?3\n0-0\n"),
                     write(tmp_path / "possible", "\n1-0 0p1\n"), [4, 2], [5, 2])
    predicted = [links((0, 0), (2, 2), (3, 4)), links((1, 0), (1, 1))]
    scores = score_links(predicted, gold)
    assert (scores.links, scores.sure) == (5, 3)
    assert scores.precision == pytest.approx(3 / 5)
    assert scores.recall == pytest.approx(1 / 3)
    assert scores.aer == pytest.approx(1 / 2)
    first = score_links(predicted[:1], gold[:1])  # P = 2/3, R = 1/2, AER = 1 - 3/5
    assert (first.precision, first.recall, first.aer) == pytest.approx((2 / 3, 1 / 2, 2 / 5))
    perfect = score_links([links((0, 0), (1, 1))], [gold[0]])  # the sure links alone
    assert (perfect.precision, perfect.recall, perfect.aer) == pytest.approx((1.0, 1.0, 0.0))
    nothing = score_links([links()], [gold[0]])
    assert (nothing.precision, nothing.recall, nothing.aer) == (None, 0.0, 1.0)


@pytest.mark.parametrize(("content", "possible", "message"), [
    ("0-0\n0-5\n", None, "gold line 2: link 0-5 is past the sentence pair (2 source words, "
                         "3 target words"),
    ("0-0\n2p0\n", None, "gold line 2: link 2-0 is past"),
    ("0-0\n", None, "gold: 1 lines, the parallel text has 2 pairs"),
    ("0-0\n0_1\n", None, "gold line 2: '0_1' is not a link"),
    ("0-0\n0-1\n", "\n1p3\n", "possible line 2: link 1-3 is past"),
    ("0-0\n\xff\n", None, "gold line 2: not valid UTF-8 (byte 0xff"),
])
def test_a_bad_gold_file_is_one_line_naming_file_and_line(
    tmp_path: Path, content: str, possible: str | None, message: str
) -> None:
    gold = write(tmp_path / "gold", "")
    gold.write_bytes(content.encode("latin-1") if "\xff" in content else content.encode())
    extra = None if possible is None else write(tmp_path / "possible", possible)
    with pytest.raises(UserError) as err:
        read_gold(gold, extra, src_words=[2, 2], tgt_words=[3, 3])
    assert message in str(err.value).replace(str(tmp_path) + "/", "")
    assert "\n" not in str(err.value)


def test_links_are_written_sorted_as_pharaoh() -> None:
    assert format_links(links((2, 1), (0, 3), (0, 0))) == "0-0 0-3 2-1"
    assert format_links(links()) == ""


def test_intersection_union_and_grow_diag_final_link_by_link() -> None:
    """forward 0-1 1-2 3-0, reverse 0-0 1-2. Intersection {1-2}. Grow, first pass in (i, j)
    order: 0-0 touches nothing aligned; 0-1 is the diagonal neighbour of 1-2 with source word 0
    unaligned: added; 3-0 touches nothing. Second pass: 0-0 now touches 0-1 and its target word
    0 is unaligned: added. Third pass adds nothing. Final: forward's 3-0 has source word 3
    unaligned: added. Grow-diag-final = the union here, reached only in this order: one
    growing pass, or the final step first, would align target word 0 with 3-0 before 0-0 could
    grow, and leave 0-0 out."""
    forward, reverse = links((0, 1), (1, 2), (3, 0)), links((0, 0), (1, 2))
    assert intersection(forward, reverse) == links((1, 2))
    assert union(forward, reverse) == links((0, 0), (0, 1), (1, 2), (3, 0))
    assert grow_diag_final(forward, reverse) == links((0, 0), (0, 1), (1, 2), (3, 0))
    assert SYMMETRIZATIONS["grow-diag-final"] is grow_diag_final


def test_grow_diag_final_leaves_out_union_links_whose_words_are_both_aligned() -> None:
    """forward 0-0 4-5 1-5 3-2, reverse 0-0 4-5 1-1; intersection {0-0, 4-5}. Grow: 1-1 is the
    diagonal neighbour of 0-0, both words unaligned: added (the grow step's link); 1-5 then has
    both words aligned (1 by 1-1, 5 by 4-5): never added. Final: 3-2 touches nothing but its
    words are unaligned: added (the final step's link)."""
    forward = links((0, 0), (4, 5), (1, 5), (3, 2))
    reverse = links((0, 0), (4, 5), (1, 1))
    assert grow_diag_final(forward, reverse) == links((0, 0), (4, 5), (1, 1), (3, 2))
    assert intersection(forward, reverse) == links((0, 0), (4, 5))
    assert union(forward, reverse) == forward | {(1, 1)}


def test_the_final_step_takes_the_forward_links_before_the_reverse() -> None:
    """Intersection {0-0, 0-1}; forward's 2-0 and reverse's 2-1 touch nothing aligned, so only
    the final step can add them. Each has source word 2 unaligned until the first of them is
    added, which aligns it: the one of the first direction wins."""
    forward, reverse = links((0, 0), (0, 1), (2, 0)), links((0, 0), (0, 1), (2, 1))
    assert grow_diag_final(forward, reverse) == links((0, 0), (0, 1), (2, 0))
    assert grow_diag_final(reverse, forward) == links((0, 0), (0, 1), (2, 1))


def test_a_link_grown_in_a_pass_counts_for_the_links_after_it_in_that_pass() -> None:
    """Intersection {3-3}; 2-2 (diagonal neighbour, both words unaligned) is grown first in
    (i, j) order, and 2-3 after it then has both words aligned: left out (atools' order;
    checking a whole pass against the alignment before it would add both)."""
    forward, reverse = links((3, 3)), links((2, 2), (2, 3), (3, 3))
    assert grow_diag_final(forward, reverse) == links((2, 2), (3, 3))
