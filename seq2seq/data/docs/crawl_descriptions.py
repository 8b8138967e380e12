"""Dungeon Crawl Stone Soup's descriptions (package crawl-common) and their Korean translation.

`usr/share/crawl/dat/descript/<name>.txt` holds the English texts the game shows (monsters,
items, gods, spells, quotes, the tutorial, ...); `descript/ko/<name>.txt` their Korean
translation. Entries are separated by `%%%%` lines; an entry's first line is its key (`orc
warrior`, `tutorial1 start`), the rest its text, in paragraphs separated by blank lines, with
`#` comment lines. Entries pair on (file, key), and their paragraphs by position where the two
counts agree; an entry whose counts differ is left out (its translation is of an older English
text: a paragraph added or dropped since). A quote's attribution line (indented, starting with
a dash) opens a paragraph of its own. A line that is only `<key>` links to another entry's text
(read under that key) and is dropped. The markup goes: colour and formatting tags
(`<lightblue>`, `</w>`, `<input>`, `<localtiles>`: their text stays), with `<<` an escaped `<`.
Key bindings (`$cmd[CMD_REST]`) and Lua expressions (`{{ return you.race() }}`, kept in the
paragraph they open in) stay as placeholders. Entries marked `:nowrap` are preformatted screens
(key tables, ASCII maps) and are left out.

The document is `<source>/<file stem>/<key>`: every entry is a text of its own (one monster,
one god, one tutorial step), whereas a file holds hundreds of unrelated entries, so a family
of a whole file would send thousands of pairs to one split at once. Phrases that entries of a
file repeat are left to the held-out twin cleanup.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from seq2seq.data.docs.segments import Segment, normalize_space

DESCRIPT_DIR = "usr/share/crawl/dat/descript"
_SEPARATOR = re.compile(r"^%%%%\s*$", re.MULTILINE)
_LINK = re.compile(r"^<[^</\n][^<>\n]*>[ \t]*$", re.MULTILINE)
_MARKUP = re.compile(r"<<|</?[A-Za-z_][\w-]*>", re.ASCII)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n|\n(?=[ \t]+[-—])")
_LUA = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_NOWRAP = re.compile(r"^:nowrap\s*$", re.MULTILINE)


def read_entries(text: str) -> dict[str, str]:
    """The entries of a description file: key -> text (comment lines removed)."""
    entries = {}
    for chunk in _SEPARATOR.split(text)[1:]:
        lines = [line for line in chunk.strip("\n").split("\n") if not line.startswith("#")]
        if lines and lines[0].strip():
            entries[lines[0].strip()] = "\n".join(lines[1:])
    return entries


def paragraphs(entry: str) -> list[str]:
    """An entry's paragraphs without links and markup, whitespace normalised, empty ones
    dropped."""
    plain = _MARKUP.sub(lambda match: "<" if match[0] == "<<" else "", _LINK.sub("", entry))
    plain = _LUA.sub(lambda match: match[0].replace("\n", " "), plain)
    found = (normalize_space(paragraph) for paragraph in _PARAGRAPH_BREAK.split(plain))
    return [paragraph for paragraph in found if paragraph]


def align_crawl(root: Path, source: str) -> Iterator[Segment]:
    """Pair the Korean descriptions of crawl-common with the English ones.

    Args:
        root: the unpacked crawl-common package (holding `usr/`).
        source: the source name that starts each segment's document name.

    Yields:
        One segment per paragraph pair; the document is `<source>/<file stem>/<key>`.
    """
    descript = root / DESCRIPT_DIR
    for ko_file in sorted((descript / "ko").glob("*.txt")):
        en_file = descript / ko_file.name
        if not en_file.is_file():
            continue
        en_entries = read_entries(en_file.read_text(encoding="utf-8", errors="replace"))
        ko_entries = read_entries(ko_file.read_text(encoding="utf-8", errors="replace"))
        for key, ko_entry in ko_entries.items():
            en_entry = en_entries.get(key)
            if en_entry is None or _NOWRAP.search(en_entry) or _NOWRAP.search(ko_entry):
                continue
            en, ko = paragraphs(en_entry), paragraphs(ko_entry)
            if len(en) == len(ko):
                for en_text, ko_text in zip(en, ko, strict=True):
                    yield Segment(ko_text, en_text, f"{source}/{ko_file.stem}/{key}")
