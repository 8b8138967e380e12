"""Ren'Py games' Korean translation files (renpy-thequestion, renpy-demo).

A game's translation lives in `usr/share/games/renpy/<game>/game/tl/korean/*.rpy`, in blocks
of two kinds:
- dialogue: `translate korean <id>:` holds the original say statements as comments (`# e
  "English"`, `# "English"`, `# "Eileen" "English"`) and the translated ones after them (`e
  "한국어"`); the two pair by position where the block holds as many of each;
- strings: `translate korean strings:` holds `old "English"` / `new "한국어"` pairs (menus,
  the interface).
`translate korean python:` blocks and other statements (`nvl clear`, assignments) are skipped.
Ren'Py's escapes are undone (`\\"`, `\\n`, `\\\\`), and its text tags removed (`{b}`,
`{/b}`, `{w}`, `{color=#f00}`, `{a=...}`, `{#weekday}`: their text stays), with `{{` an
escaped `{`; interpolations (`[player]`) and format fields (`{}`, `{0}`) stay as placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from seq2seq.data.docs.segments import Segment, normalize_space

GAMES_DIR = "usr/share/games/renpy"
TRANSLATION_DIR = "game/tl/korean"
_STRING = r'"(?:[^"\\]|\\.)*"'
# an optional speaker (a character's name or a quoted name), the text, optional arguments
_SAY = re.compile(rf"^(?:(?:\w+|{_STRING})\s+)*?({_STRING})(?:\s+\w+)*\s*$")
_OLD_NEW = re.compile(rf"^(old|new)\s+({_STRING})\s*$")
_BLOCK = re.compile(r"^translate\s+\w+\s+(\w+)\s*:")
_ESCAPE = re.compile(r"\\(.)")
_TAG = re.compile(r"\{\{|\{#[^}]*\}|\{/?=?[A-Za-z_]+(?:=[^}]*)?\}")


def clean(literal: str) -> str:
    """The text of a Ren'Py string literal (quotes included): escapes undone, text tags
    removed, whitespace normalised."""
    text = _ESCAPE.sub(lambda match: "\n" if match[1] == "n" else match[1], literal[1:-1])
    return normalize_space(_TAG.sub(lambda match: "{" if match[0] == "{{" else "", text))


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """The `translate` blocks of a translation file: (block name, its non-blank lines
    stripped); the name is the identifier, `strings` or `python`."""
    found: list[tuple[str, list[str]]] = []
    for line in text.lstrip("\ufeff").splitlines():
        if header := _BLOCK.match(line):
            found.append((header[1], []))
        elif found and line.strip():
            found[-1][1].append(line.strip())
    return found


def file_pairs(text: str) -> Iterator[tuple[str, str]]:
    """The (English, Korean) string literals of one translation file, quotes included."""
    for name, lines in blocks(text):
        if name == "strings":
            yield from _old_new_pairs(lines)
        elif name != "python":
            yield from _dialogue_pairs(lines)


def _old_new_pairs(lines: list[str]) -> Iterator[tuple[str, str]]:
    old: str | None = None
    for line in lines:
        if (entry := _OLD_NEW.match(line)) and entry[1] == "old":
            old = entry[2]
        elif entry and old is not None:
            yield old, entry[2]
            old = None


def _dialogue_pairs(lines: list[str]) -> Iterator[tuple[str, str]]:
    originals: list[str] = []
    translations: list[str] = []
    for line in lines:
        comment = line.startswith("#")
        if say := _SAY.match(line.removeprefix("#").strip()):
            (originals if comment else translations).append(say[1])
    if len(originals) == len(translations):
        yield from zip(originals, translations, strict=True)


def align_renpy(root: Path, source: str, game_dir: str) -> Iterator[Segment]:
    """Pair the English and Korean lines of one Ren'Py game's Korean translation.

    Args:
        root: the unpacked game package (holding `usr/`).
        source: the source name that starts each segment's document name.
        game_dir: the game's folder under `usr/share/games/renpy` (`the_question`, `demo`).

    Yields:
        One segment per dialogue line or interface string; the document is
        `<source>/<game_dir>/<file stem>`.
    """
    for path in sorted((root / GAMES_DIR / game_dir / TRANSLATION_DIR).glob("*.rpy")):
        for en, ko in file_pairs(path.read_text(encoding="utf-8", errors="replace")):
            yield Segment(clean(ko), clean(en), f"{source}/{game_dir}/{path.stem}")
