"""What the aligners share: the Segment they yield, whitespace normalisation, and pairing by
position of pages that keep their original's structure."""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

_SPACE = re.compile(r"\s+")
_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#\d+|#[xX][0-9A-Fa-f]+);")
T = TypeVar("T")


class Segment(NamedTuple):
    """One aligned pair of texts.

    Attributes:
        translation: the translated text (German or Korean: `sources.LANGUAGES`).
        en: the English text, the original.
        document: `<source>/<relative path>[/<part>]`.
        family: the documents that go to one split together, named by one of them (set by
            the build, `filters.document_families`); "" until then.
        domain: its source's domain (`sources.DOMAINS`), stored by the build; "" until then.
    """

    translation: str
    en: str
    document: str
    family: str = ""
    domain: str = ""


def normalize_space(text: str) -> str:
    """NFC-normalize, turn every run of whitespace (no-break spaces included) into one space,
    and strip the ends."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def unescape_entities(text: str) -> str:
    """`text` with its HTML entities decoded (`R&amp;D` -> `R&D`, `&lt;-&gt;` -> `<->`): for
    the strings that programs render as markup (catalogs, Mozilla's), where an entity is the
    character it names. Documentation pages are decoded by their parser instead."""
    return _ENTITY.sub(lambda match: html.unescape(match.group(0)), text)


class PageCounts(NamedTuple):
    """How the pages of a structural source aligned.

    Attributes:
        common: pages present in both languages.
        whole: pages whose block counts agree, paired whole.
        by_section: pages paired only in the sections whose block counts agree.
    """

    common: int
    whole: int
    by_section: int


def pair_by_position(
    en: Sequence[T], translated: Sequence[T], is_heading: Callable[[T], bool]
) -> tuple[list[tuple[T, T]], bool]:
    """Pair the blocks of a page and its translation by position.

    When the two block counts agree the whole page pairs up. Otherwise, when both pages hold
    the same number of sections (a section starts at each heading block), the sections pair
    by position, and each section pair whose block counts agree pairs up.

    Returns:
        The (English, translated) block pairs, and whether the whole page paired.
    """
    if len(en) == len(translated):
        return list(zip(en, translated, strict=True)), True
    en_sections = _sections(en, is_heading)
    de_sections = _sections(translated, is_heading)
    if len(en_sections) != len(de_sections):
        return [], False
    return [
        pair
        for en_section, de_section in zip(en_sections, de_sections, strict=True)
        if len(en_section) == len(de_section)
        for pair in zip(en_section, de_section, strict=True)
    ], False


def _sections(blocks: Sequence[T], is_heading: Callable[[T], bool]) -> list[list[T]]:
    sections: list[list[T]] = [[]]
    for block in blocks:
        if is_heading(block) and sections[-1]:
            sections.append([])
        sections[-1].append(block)
    return sections
