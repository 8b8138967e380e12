"""HTML manuals translated with po4a or itstool (debian-reference, debian-handbook, ...).

Such a translation changes the text of each block and nothing else, so a translated page has
the original's structure. A page is read as its sequence of block elements (`p`, headings,
`li`, `dt`, `dd`, table cells, `pre`, `caption`, `title`; for Mallard pages also `desc` and
`screen`); the text inside a nested block belongs to the nested one. Where the English and
translated page hold the same number of blocks, blocks pair by position; otherwise, where they
hold the same number of sections (a section starts at a heading or `title`), the sections
with equal block counts pair by position. `pre` and `screen` blocks count but are not used
(code and program output); DocBook's navigation bars (`navheader`, `navfooter`) are skipped
with the blocks inside them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

from seq2seq.data.docs.libreoffice_help import VOID_TAGS
from seq2seq.data.docs.segments import PageCounts, Segment, normalize_space, pair_by_position

HEADING_TAGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "title"})
BLOCK_TAGS = HEADING_TAGS | {"p", "li", "dt", "dd", "td", "th", "pre", "caption", "figcaption",
                             "desc", "screen"}
UNUSED_TAGS = frozenset({"pre", "screen"})
SKIPPED_TAGS = frozenset({"script", "style"})
SKIPPED_CLASSES = frozenset({"navheader", "navfooter"})


class HtmlBlock(NamedTuple):
    """One block element of a page: its tag and its text (None when the text is unused)."""

    tag: str
    text: str | None


class _BlockParser(HTMLParser):
    """Collects the text of every block element, in the order the blocks open."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[str, list[str]]] = []  # tag, text pieces
        self._open: list[tuple[str, int | None, bool]] = []  # tag, index in blocks, skipped
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self.handle_data(" ")
        if tag in VOID_TAGS:
            return
        skipped = tag in SKIPPED_TAGS or not SKIPPED_CLASSES.isdisjoint(
            (dict(attrs).get("class") or "").split()
        )
        self._skipping += skipped
        index = None
        if tag in BLOCK_TAGS and not self._skipping:
            index = len(self.blocks)
            self.blocks.append((tag, []))
        self._open.append((tag, index, skipped))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, -1, -1):
            if self._open[depth][0] == tag:
                self._skipping -= sum(skipped for _, _, skipped in self._open[depth:])
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        for _, index, _ in reversed(self._open):
            if index is not None:
                self.blocks[index][1].append(data)
                return


def page_blocks(html: str) -> list[HtmlBlock]:
    """The block elements of an HTML (or Mallard) page in the order they open."""
    parser = _BlockParser()
    parser.feed(html)
    parser.close()
    return [HtmlBlock(tag, None if tag in UNUSED_TAGS else normalize_space("".join(pieces)))
            for tag, pieces in parser.blocks]


@dataclass(frozen=True)
class Manual:
    """Where one manual keeps its English pages and their translation's.

    Attributes:
        en_package: the package holding the English pages.
        translation_package: the package holding the translated pages (may equal en_package).
        en_dir: the English pages' folder inside en_package.
        translation_dir: the translated pages' folder inside translation_package.
        en_suffix: the English pages' file-name ending, e.g. `.en.html` or `.html`.
        translation_suffix: the translated pages' file-name ending.
        exclude: names of pages left out (without the ending), e.g. a glossary sorted in
            German order or a single-page copy of the whole book.
    """

    en_package: str
    translation_package: str
    en_dir: str
    translation_dir: str
    en_suffix: str = ".html"
    translation_suffix: str = ".html"
    exclude: tuple[str, ...] = ()

    def pages(self, roots: dict[str, Path]) -> list[tuple[str, Path, Path]]:
        """(page name, English page, translated page) for every page present in both
        languages."""
        en_dir = roots[self.en_package] / self.en_dir
        tr_dir = roots[self.translation_package] / self.translation_dir
        found = []
        for en_page in sorted(en_dir.glob(f"*{self.en_suffix}")):
            name = en_page.name.removesuffix(self.en_suffix)
            tr_page = tr_dir / f"{name}{self.translation_suffix}"
            if name not in self.exclude and tr_page.is_file():
                found.append((name, en_page, tr_page))
        return found


def align_manual(
    manual: Manual, roots: dict[str, Path], source: str, counts: list[PageCounts] | None = None
) -> Iterator[Segment]:
    """Pair the blocks of every page of `manual` (see `pair_by_position`).

    Args:
        manual: where the pages are.
        roots: package name -> unpacked root.
        source: the source name that starts each segment's document name.
        counts: if given, a PageCounts is appended once every page has been read.

    Yields:
        One segment per pair of used blocks; the document is `<source>/<page name>`.
    """
    pages = manual.pages(roots)
    whole = by_section = 0
    for name, en_page, tr_page in pages:
        pairs, paired_whole = pair_by_position(
            page_blocks(en_page.read_text(encoding="utf-8", errors="replace")),
            page_blocks(tr_page.read_text(encoding="utf-8", errors="replace")),
            lambda block: block.tag in HEADING_TAGS,
        )
        whole += paired_whole and bool(pairs)
        by_section += not paired_whole and bool(pairs)
        for en, translated in pairs:
            if en.text is not None and translated.text is not None:
                yield Segment(translated.text, en.text, f"{source}/{name}")
    if counts is not None:
        counts.append(PageCounts(len(pages), whole, by_section))
