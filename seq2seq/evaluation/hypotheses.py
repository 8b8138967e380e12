"""Hypothesis files: one hypothesis a line, whatever characters a model emits.

`str.splitlines` breaks a line at more characters than the line feed (carriage return, form feed,
the file separators, NEL, the Unicode line and paragraph separators), so a hypothesis holding one
would shift every later line of a file read back that way. Writers replace them all by spaces
(`one_line`, also what translate prints) and readers split at line feeds only.
"""

from __future__ import annotations

from pathlib import Path

LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # every character `str.splitlines` splits at
_AS_SPACES = str.maketrans(dict.fromkeys(LINE_BREAKS, " "))


def one_line(text: str) -> str:
    """`text` with each line-breaking character replaced by a space."""
    return text.translate(_AS_SPACES)


def write_hypotheses(path: Path, hypotheses: list[str]) -> None:
    """Write one hypothesis a line, each made `one_line`."""
    path.write_text("".join(one_line(h) + "\n" for h in hypotheses), encoding="utf-8")


def read_hypotheses(path: Path) -> list[str]:
    """The hypotheses of a file `write_hypotheses` wrote, in order."""
    text = path.read_text(encoding="utf-8")
    return text.removesuffix("\n").split("\n") if text else []
