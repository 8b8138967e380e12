"""Word alignments in the Pharaoh format: reading gold sets, scoring links, symmetrising.

A line holds one sentence pair's links as space-separated `i-j`, i a source and j a target word
(whitespace words, counted from 0). A gold set marks sure links `i-j` and possible ones `i?j`
or `ipj`, or keeps the possible links in a second file of its own (the "talp" convention); a
sure link is also possible.

Precision, recall and AER of predicted links A against sure links S and possible links P
(Och & Ney 2003): P = |A∩P| / |A|, R = |A∩S| / |S|, AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|).

Symmetrisation of two directions' links as fast_align's atools computes it: the intersection,
the union, and grow-diag-final (Koehn et al. 2005): start from the intersection; grow it with
links of the union that touch a link already in it (the 8 neighbours, diagonals included) and
whose source or target word is still unaligned, in (i, j) order, pass after pass until a pass
adds nothing; then the final step adds each link of the first direction, then of the second,
whose source or target word is still unaligned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.alignment import Links
from seq2seq.errors import UserError
from seq2seq.evaluation.aer import Counts

Link = tuple[int, int]  # (source word, target word)
LINK = re.compile(r"(\d+)([-?p])(\d+)")
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def format_links(links: Iterable[Link]) -> str:
    """`i-j` links, sorted, space-separated: one Pharaoh line."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


def read_lines(path: Path | str, what: str) -> list[str]:
    """The lines of a UTF-8 text file, without their line endings.

    Raises:
        UserError: the file cannot be read, or a line is not valid UTF-8 (naming the line).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read the {what} ({err.strerror})") from None
    rows = raw.split(b"\n")
    if rows[-1] == b"":
        rows.pop()  # the newline that ends the last line
    lines = []
    for number, row in enumerate(rows, start=1):
        row = row.removesuffix(b"\r")
        try:
            lines.append(row.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise UserError(f"{path} line {number}: not valid UTF-8 (byte "
                            f"0x{row[err.start]:02x} at column {err.start + 1}); convert the "
                            "file to UTF-8 first") from None
    return lines


def parse_gold_line(line: str, path: Path | str, number: int) -> tuple[set[Link], set[Link]]:
    """The sure (`i-j`) and possible-only (`i?j`, `ipj`) links of one gold line.

    Raises:
        UserError: a token that is not a link (naming the file and line).
    """
    sure: set[Link] = set()
    possible: set[Link] = set()
    for token in line.split():
        match = LINK.fullmatch(token)
        if match is None:
            raise UserError(f"{path} line {number}: {token!r} is not a link: i-j (sure), i?j or "
                            "ipj (possible), i and j word indices from 0")
        i, kind, j = match.groups()
        (sure if kind == "-" else possible).add((int(i), int(j)))
    return sure, possible


def read_gold(
    path: Path | str, possible_path: Path | str | None, src_words: list[int], tgt_words: list[int]
) -> list[Links]:
    """A gold alignment of a parallel text whose pairs have `src_words[k]`, `tgt_words[k]`
    words: sure links `i-j`, possible `i?j` / `ipj` and, with `possible_path`, every link of
    that file possible too; the possible links hold the sure ones.

    Raises:
        UserError: a file whose line count is not the text's, a token that is not a link, or a
            link past its sentence pair (naming the file and line).
    """
    files = [(path, read_lines(path, "gold alignment"))]
    if possible_path is not None:
        files.append((possible_path, read_lines(possible_path, "possible links")))
    for name, lines in files:
        if len(lines) != len(src_words):
            raise UserError(f"{name}: {len(lines)} lines, the parallel text has "
                            f"{len(src_words)} pairs; one line of links a pair (empty: none)")
    gold = []
    for k in range(len(src_words)):
        sure, possible = parse_gold_line(files[0][1][k], path, k + 1)
        parsed = [(path, sure | possible)]
        if possible_path is not None:
            extra = set().union(*parse_gold_line(files[1][1][k], possible_path, k + 1))
            parsed.append((possible_path, extra))
            possible |= extra
        for name, links in parsed:
            for i, j in sorted(links):
                if i >= src_words[k] or j >= tgt_words[k]:
                    raise UserError(f"{name} line {k + 1}: link {i}-{j} is past the sentence "
                                    f"pair ({src_words[k]} source words, {tgt_words[k]} target "
                                    "words, counted from 0)")
        gold.append(Links(frozenset(sure), frozenset(sure | possible)))
    return gold


@dataclass(frozen=True)
class Scores:
    """Links scored against a gold set (Och & Ney 2003); None where a denominator is 0."""

    precision: float | None
    recall: float | None
    aer: float | None
    links: int  # |A|
    sure: int  # |S|


def score_links(predicted: list[frozenset[Link]], gold: list[Links]) -> Scores:
    """Precision |A∩P|/|A|, recall |A∩S|/|S| and AER of the predicted links of every pair."""
    counts = Counts()
    for links, reference in zip(predicted, gold, strict=True):
        counts += Counts(len(links), len(reference.sure), len(links & reference.sure),
                         len(links & reference.possible))
    aer = counts.summary(with_mass=False)["aer"]
    return Scores(counts.links_possible / counts.links if counts.links else None,
                  counts.links_sure / counts.sure if counts.sure else None,
                  None if aer is None else float(aer), counts.links, counts.sure)


def intersection(forward: frozenset[Link], reverse: frozenset[Link]) -> frozenset[Link]:
    """The links both directions have."""
    return forward & reverse


def union(forward: frozenset[Link], reverse: frozenset[Link]) -> frozenset[Link]:
    """The links either direction has."""
    return forward | reverse


def grow_diag_final(forward: frozenset[Link], reverse: frozenset[Link]) -> frozenset[Link]:
    """atools' grow-diag-final (see the module docstring) of two directions' links, both as
    (source word, target word)."""
    aligned = set(forward & reverse)
    src_aligned = {i for i, _ in aligned}
    tgt_aligned = {j for _, j in aligned}

    def add(i: int, j: int) -> None:
        aligned.add((i, j))
        src_aligned.add(i)
        tgt_aligned.add(j)

    def one_unaligned(i: int, j: int) -> bool:
        return i not in src_aligned or j not in tgt_aligned

    candidates = sorted((forward | reverse) - aligned)
    grew = True
    while grew:  # grow-diag: pass after pass over what is left, until one adds nothing
        added = []
        for i, j in candidates:
            if one_unaligned(i, j) and any((i + di, j + dj) in aligned for di, dj in NEIGHBOURS):
                add(i, j)
                added.append((i, j))
        candidates = [link for link in candidates if link not in added]
        grew = bool(added)
    for direction in (forward, reverse):  # final: the first direction's links, then the second's
        for i, j in sorted(direction):
            if (i, j) not in aligned and one_unaligned(i, j):
                add(i, j)
    return frozenset(aligned)


SYMMETRIZATIONS: dict[str, Callable[[frozenset[Link], frozenset[Link]], frozenset[Link]]] = {
    "intersection": intersection,
    "union": union,
    "grow-diag-final": grow_diag_final,
}
