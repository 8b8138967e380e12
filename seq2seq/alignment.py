"""Reference word alignments for the attention metric: eflomal links, cached per corpus.

Words are the tokens of `WORD`: runs of letters and digits, and every other non-space character
on its own, so "Laden." is the two words "Laden" and ".". eflomal (Östling & Tiedemann 2016)
aligns the source and target words of every split of a corpus in one run, in both directions;
the links both directions agree on are sure, those of either are possible (Och & Ney 2003).
eflomal samples with a generator it seeds from the clock, so the links are computed once per
corpus and word tokenization and cached: every model of a corpus is scored on the same links.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

WORD = re.compile(r"\w+|[^\w\s]")
ALIGNMENT_VERSION = 1  # bump when WORD or the aligner's settings change


def word_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) character offsets of the words of `text`."""
    return [match.span() for match in WORD.finditer(text)]


def words(text: str) -> list[str]:
    return WORD.findall(text)


@dataclass(frozen=True)
class Links:
    """Reference links of one sentence pair, as (source word, target word) index pairs."""

    sure: frozenset[tuple[int, int]]  # both directions agree
    possible: frozenset[tuple[int, int]]  # either direction; holds every sure link


class AlignerUnavailable(RuntimeError):
    """eflomal is not installed or failed; the metric is then reported as unavailable."""


def parse_links(line: str) -> frozenset[tuple[int, int]]:
    """One line of a Pharaoh links file: "i-j ..." with i a source and j a target word."""
    return frozenset((int(i), int(j)) for i, j in (link.split("-") for link in line.split()))


def symmetrize(forward: list[str], reverse: list[str]) -> list[Links]:
    """Sure = both directions' links, possible = either's, from the two directions' lines."""
    links = []
    for f, r in zip(forward, reverse, strict=True):
        f_links, r_links = parse_links(f), parse_links(r)
        links.append(Links(f_links & r_links, f_links | r_links))
    return links


def run_eflomal(src: list[str], tgt: list[str]) -> tuple[list[str], list[str]]:
    """Align whitespace-tokenized sentence pairs; the forward and reverse links, one line each.

    Raises:
        AlignerUnavailable: eflomal is missing, or its binary failed.
    """
    try:
        from eflomal import Aligner  # optional: `pip install eflomal` builds it with a C compiler
    except ImportError:
        raise AlignerUnavailable("the eflomal package is not installed (pip install eflomal)") \
            from None
    with tempfile.TemporaryDirectory(prefix="eflomal-") as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        try:
            Aligner().align(src, tgt, links_filename_fwd=str(fwd), links_filename_rev=str(rev),
                            quiet=True)
            return fwd.read_text().splitlines(), rev.read_text().splitlines()
        except (OSError, ValueError, subprocess.CalledProcessError) as err:
            raise AlignerUnavailable(f"eflomal failed: {err}") from None


def align_pairs(src: list[str], tgt: list[str]) -> list[Links]:
    """Links of every pair; a pair with no word on a side has none (eflomal is not asked)."""
    src_words, tgt_words = [words(s) for s in src], [words(t) for t in tgt]
    keep = [i for i, (s, t) in enumerate(zip(src_words, tgt_words, strict=True)) if s and t]
    forward, reverse = run_eflomal([" ".join(src_words[i]) for i in keep],
                                   [" ".join(tgt_words[i]) for i in keep])
    if len(forward) != len(keep) or len(reverse) != len(keep):
        raise AlignerUnavailable(f"eflomal wrote {len(forward)} lines for {len(keep)} pairs")
    links = [Links(frozenset(), frozenset())] * len(src)
    for i, pair_links in zip(keep, symmetrize(forward, reverse), strict=True):
        links[i] = pair_links
    return links


def alignment_key(splits: dict[str, tuple[list[str], list[str]]]) -> str:
    """The cache folder name of a corpus's links: 16 hex digits of a sha256 over the version
    and every split's texts (split name -> (source texts, target texts))."""
    digest = hashlib.sha256(f"v{ALIGNMENT_VERSION}".encode())
    for name in sorted(splits):
        for side in splits[name]:
            digest.update(name.encode())
            digest.update("\n".join(side).encode())
    return digest.hexdigest()[:16]


def links_fingerprint(links: dict[str, list[Links]]) -> str:
    """A sha256 over the sure and possible links of every split: equal links, equal digest
    (eflomal samples anew on every run, so a second alignment of the same text differs)."""
    digest = hashlib.sha256()
    for name in sorted(links):
        digest.update(f"|{name}|{len(links[name])}|".encode())
        for pair in links[name]:
            for attr in ("sure", "possible"):
                digest.update(" ".join(f"{i}-{j}" for i, j in sorted(getattr(pair, attr)))
                              .encode() + b"\n")
    return digest.hexdigest()


def reference_links(
    splits: dict[str, tuple[list[str], list[str]]], cache_root: Path, verbose: bool = True
) -> dict[str, list[Links]] | None:
    """The reference links of every split, aligned together (the training split gives eflomal
    the statistics the small evaluated splits lack) and cached under `cache_root`.

    Args:
        splits: split name -> (source texts, target texts).
        cache_root: the corpus's alignment folder, e.g. data/alignments/<corpus name>.
        verbose: print what was aligned or reused.

    Returns:
        split name -> one `Links` per pair; None (after one line saying why) when eflomal is not
        available, so that training goes on without the metric.
    """
    folder = cache_root / alignment_key(splits)
    files = {name: (folder / f"{name}.sure", folder / f"{name}.possible") for name in splits}
    if all(sure.is_file() and possible.is_file() for sure, possible in files.values()):
        if verbose:
            print(f"reusing word alignments {folder}")
        return {name: read_links(*paths) for name, paths in files.items()}
    names = sorted(splits)
    src = [text for name in names for text in splits[name][0]]
    tgt = [text for name in names for text in splits[name][1]]
    try:
        links = align_pairs(src, tgt)
    except AlignerUnavailable as err:
        print(f"attention alignment (AER): unavailable: {err}")
        return None
    # Staged in a folder of its own and renamed into place whole: two trainings that align
    # the same corpus at once (make compare with jobs=2) each sample other links, and both
    # must go on with the links of the one that lands first, as every later run will.
    cache_root.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=cache_root))
    try:
        start = 0
        for name in names:
            write_links(links[start:start + len(splits[name][0])],
                        *(staged / path.name for path in files[name]))
            start += len(splits[name][0])
        try:
            staged.rename(folder)
        except OSError:  # a concurrent alignment won, or an older version left part of one
            if not all(sure.is_file() and possible.is_file() for sure, possible in files.values()):
                shutil.rmtree(folder)  # only a stale folder is ever incomplete
                staged.rename(folder)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    if verbose:
        print(f"aligned {len(src):,} sentence pairs with eflomal into {folder}")
    return {name: read_links(*paths) for name, paths in files.items()}


def write_links(links: list[Links], sure_path: Path, possible_path: Path) -> None:
    for path, attr in ((sure_path, "sure"), (possible_path, "possible")):
        lines = (" ".join(f"{i}-{j}" for i, j in sorted(getattr(pair, attr))) for pair in links)
        path.write_text("".join(line + "\n" for line in lines))


def read_links(sure_path: Path, possible_path: Path) -> list[Links]:
    sure, possible = sure_path.read_text().splitlines(), possible_path.read_text().splitlines()
    return [Links(parse_links(s), parse_links(p)) for s, p in zip(sure, possible, strict=True)]


def corpus_links(
    corpus: dict[str, tuple[list[str], list[str]]], root: Path, name: str, verbose: bool = True,
    splits: tuple[str, ...] = ("validation", "test"),
) -> dict[str, list[Links]] | None:
    """The reference links of a corpus's validation and test splits (aligned with its training
    split), cached under `root`/alignments/`name`; None when eflomal is unavailable.

    Args:
        corpus: split name -> (source texts, target texts), as the corpus loader returns them.
        root: the data folder.
        name: the corpus config's name (one cache per corpus and direction).
        verbose: print what was aligned or reused.
        splits: the splits whose links are returned (guided alignment adds train).
    """
    links = reference_links(corpus, root / "alignments" / name, verbose=verbose)
    return None if links is None else {split: links[split] for split in splits}
