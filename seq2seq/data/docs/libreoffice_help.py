"""LibreOffice help pages (libreoffice-help-en-us, -de, -ko), aligned by paragraph id.

Both packages hold the same HTML pages under `usr/share/libreoffice/help/<lang>/`. Every
paragraph and heading carries the same id in both languages (`par_id…`, `hd_id…`), so a
paragraph's translation is found by joining on (relative path, id); an id that repeats within a
page joins by its occurrence. Text inside an element marked `hidden` (a platform or module
variant, shown by the help's script only on that platform) is skipped, and so is a paragraph
inside one, except for the `default…` variant of a switch: that is the text every other reader
sees ("Ctrl" in "Use the shortcut Ctrl + F").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

from seq2seq.data.docs.segments import Segment, normalize_space

HELP_DIR = Path("usr/share/libreoffice/help")
PARAGRAPH_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6"})
PARAGRAPH_ID = re.compile(r"(par|hd)_")
VOID_TAGS = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link",
                       "meta", "param", "source", "track", "wbr"})
SKIPPED_TAGS = frozenset({"script", "style"})

ParagraphKey = tuple[str, int]  # (id, occurrence of that id in the page)


class _ParagraphParser(HTMLParser):
    """Collects the visible text of every paragraph or heading with a par_/hd_ id."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: dict[ParagraphKey, str] = {}
        self._open: list[tuple[str, bool, ParagraphKey | None]] = []  # tag, invisible, key
        self._texts: dict[ParagraphKey, list[str]] = {}
        self._seen: dict[str, int] = {}

    def _invisible(self) -> bool:
        return bool(self._open) and self._open[-1][1]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self.handle_data(" ")
        if tag in VOID_TAGS:
            return
        attributes = dict(attrs)
        element_id = attributes.get("id") or ""
        invisible = (
            self._invisible()
            or tag in SKIPPED_TAGS
            or ("hidden" in attributes and not element_id.startswith("default"))
        )
        key = None
        if tag in PARAGRAPH_TAGS and PARAGRAPH_ID.match(element_id) and not invisible:
            occurrence = self._seen.get(element_id, 0)
            self._seen[element_id] = occurrence + 1
            key = (element_id, occurrence)
            self._texts[key] = []
        self._open.append((tag, invisible, key))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self._open) - 1, -1, -1):
            if self._open[depth][0] == tag:
                for _, _, key in self._open[depth:]:
                    if key is not None:
                        self.paragraphs[key] = normalize_space("".join(self._texts.pop(key)))
                del self._open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if self._invisible():
            return
        for _, _, key in reversed(self._open):
            if key is not None:
                self._texts[key].append(data)
                return


def page_paragraphs(html: str) -> dict[ParagraphKey, str]:
    """The visible paragraphs and headings of one help page, keyed by (id, occurrence)."""
    parser = _ParagraphParser()
    parser.feed(html)
    parser.close()
    return parser.paragraphs


def align_help(
    en_root: Path, tr_root: Path, source: str, lang: str = "de"
) -> Iterator[Segment]:
    """Join the English help pages and their translation on (relative path, paragraph id).

    Args:
        en_root: the unpacked libreoffice-help-en-us (holding `usr/share/...`).
        tr_root: the unpacked libreoffice-help-<lang> (libreoffice-help-de, -ko).
        source: the source name that starts each segment's document name.
        lang: the translation's folder under the help folder (`de`, `ko`).

    Yields:
        One segment per paragraph present in both languages, pages in sorted path order and
        paragraphs in English page order; the document is `<source>/<relative path>`.
    """
    en_dir = en_root / HELP_DIR / "en-US"
    tr_dir = tr_root / HELP_DIR / lang
    for en_page in sorted(en_dir.rglob("*.html")):
        relative = en_page.relative_to(en_dir)
        tr_page = tr_dir / relative
        if not tr_page.is_file():
            continue
        en = page_paragraphs(en_page.read_text(encoding="utf-8", errors="replace"))
        translated = page_paragraphs(tr_page.read_text(encoding="utf-8", errors="replace"))
        document = f"{source}/{relative.as_posix()}"
        for key, en_text in en.items():
            if key in translated:
                yield Segment(translated[key], en_text, document)
