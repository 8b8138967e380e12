"""The accelerator marks of interface strings, in one place; every other text keeps its
`~`, `_`, `&` and brackets as the translator wrote them.

An interface string marks the letter of its keyboard shortcut:
- before the letter, in the English string (and in a German one): LibreOffice's `~`
  (`~Save`, `Pa~ges`), GTK's `_` (`_New Game`, `S_tatistics`; LibreOffice's `.ui` dialogs
  too), Qt and KDE's `&` (`&File`), where a doubled `&&` is a literal ampersand;
- after the word, bracketed, in a Korean (or Chinese, Japanese) string: `저장(~S)`,
  `게임(_N)`, `파일(&F)`, `설정 (_S)`. The mark inside the bracket is required: `영(0)`,
  `절대값(0)`, `f(x)`, `sources.list(5)` and `단계(1)을` are text.

Only the interface catalogs carry marks: LibreOffice's (`mo_catalogs`, where `~` is always a
mark and `_` is one in `.ui` strings) and the GNOME and KDE programs' and games' menus
(`gettext_catalogs` with `interface=True`), where `_` and `&` are ambiguous (`file_name`,
`R&D`, `AT&T`): there an English mark counts only with evidence, the Korean side's bracket
naming the same letter (`S_tatistics` and `통계(_T)`), or the mark opening the string
(`_Deal`, `&File`). Fiction catalogs, documentation and descriptions are never touched.
"""

from __future__ import annotations

import re

# a bracketed accelerator after a word: `(~W)`, `(_N)`, `(&F)`, a space before it or not
BRACKETED = re.compile(r"\s?\(([~_&])([A-Za-z0-9])\)")
# a mark and the character it underlines (GTK's `Hex _#:`, `PDF_/A`), or the mark twice; before
# a space or a closing bracket it is the character itself (`an underscore (_)`, `a tilde (~)`)
_MARKED = re.compile(r"([~_&])(\1|(?=[^\s)]))")
INTERFACE_MARKS = "_&"  # GTK and Qt/KDE


def strip_bracketed(text: str) -> str:
    """`text` without its bracketed accelerators (`저장(~S)` -> `저장`); brackets with no mark
    inside (`영(0)`, `f(x)`) stay."""
    return BRACKETED.sub("", text)


def strip_marks(text: str, marks: str) -> str:
    """`text` without the marks in `marks` that stand before the character they underline
    (`Pa~ges` -> `Pages`, `Hex _#:` -> `Hex #:`); a doubled mark, or one before a space or a
    closing bracket, is the character itself (`&&` -> `&`, `a tilde (~)`). For strings whose
    marks are marks wherever they can be (LibreOffice's `~`, and `_` in its `.ui` strings)."""
    def replace(match: re.Match[str]) -> str:
        mark, doubled = match.group(1), match.group(2)
        if mark not in marks:
            return match.group(0)
        return mark if doubled else ""

    return _MARKED.sub(replace, text)


def strip_interface_pair(en: str, translation: str) -> tuple[str, str]:
    """A GTK or Qt/KDE interface message without its accelerators (see the module docstring):
    an English `_` or `&` goes where the translation's bracket names the same letter, or where
    it opens the string; `&&` is `&`; the translation loses its bracketed accelerators and an
    inline mark of a letter whose English mark went.

    Returns:
        (English, translation).
    """
    named = {(mark, letter.lower()) for mark, letter in BRACKETED.findall(translation)}
    gone: set[tuple[str, str]] = set()

    def english(match: re.Match[str]) -> str:
        mark, rest = match.group(1), match.group(2)
        if mark not in INTERFACE_MARKS:
            return match.group(0)
        if rest:  # doubled
            return mark if mark == "&" else match.group(0)
        letter = en[match.end()].lower()
        if not letter.isalnum():
            return match.group(0)
        if (mark, letter) in named or match.start() == 0:
            gone.add((mark, letter))
            return ""
        return match.group(0)

    def inline(match: re.Match[str]) -> str:
        mark, rest = match.group(1), match.group(2)
        if rest:
            return mark if mark == "&" else match.group(0)
        letter = translation_text[match.end()].lower()
        if not letter.isalnum():
            return match.group(0)
        return "" if (mark, letter) in gone else match.group(0)

    en = _MARKED.sub(english, en)
    translation_text = strip_bracketed(translation)
    return en, _MARKED.sub(inline, translation_text)
