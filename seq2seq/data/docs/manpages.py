"""Manual pages and their po4a translations (manpages-de(-dev), or a program's own).

po4a translates a roff page block by block and writes the blocks back in the original's
structure, so the English page and the German one split into the same sequence of blocks:
- a heading (`.SH`, `.SS`: its text), a `.TP` tag (the line after `.TP`), an `.IP` tag, and
  the text between two block macros (`.PP .LP .P .TP .IP .HP .TQ .RS .RE .sp .br .in ...`,
  pod2man's `.Sp`) or empty lines;
- a no-fill region (`.nf`/`.fi`, `.EX`/`.EE`, pod2man's `.Vb`/`.Ve`) or a table (`.TS`/`.TE`)
  is one block whose text is not used: its lines are code, tables or synopses, not sentences.
Comments, macro definitions, `.TH` and other requests are dropped; inline font macros (`.B`,
`.BR`, `.IR`, ...) join the text of their block. The German page ends with a credits section
(`.SH ÜBERSETZUNG`, in some packages ÜBERSETZER) that the original lacks; it is dropped. Where
a page's two block counts are equal the blocks pair by position; otherwise, where the pages
hold the same number of sections, the sections whose block counts are equal do (a
translator's extra block costs only its section). Roff markup is turned into plain text
(`\\fBopen\\fP()` -> `open()`, `\\-` -> `-`, `\\(em` -> `—`). Pages that only include another
(`.so`) and pages in the mdoc language (`.Dd`, `.Sh`: OpenSSH's) are not read.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from seq2seq.data.docs.segments import PageCounts, Segment, normalize_space, pair_by_position

MAN_DIR = Path("usr/share/man")
HEADINGS = frozenset({"SH", "SS"})
BREAKS = frozenset({"PP", "LP", "P", "TP", "TQ", "IP", "HP", "RS", "RE", "sp", "br", "in",
                    "ti", "SY", "YS", "bp", "ne", "Sp"})  # Sp: pod2man's .sp
TAG_NEXT_LINE = frozenset({"TP", "TQ"})  # the tag is the next input line
# opening -> closing request (Vb/Ve: pod2man's verbatim text)
NO_FILL = {"nf": "fi", "EX": "EE", "TS": "TE", "EQ": "EN", "Vb": "Ve"}
DEFINITIONS = frozenset({"de", "de1", "am", "ig"})  # skipped up to the line `..`
END_OF_DEFINITION = re.compile(r"[.'][ \t]*\.[ \t]*")
FONT_SPACED = frozenset({"B", "I", "SM", "SB"})  # arguments joined with spaces
FONT_ALTERNATING = frozenset({"BR", "BI", "IB", "IR", "RB", "RI"})  # joined without spaces
INLINE_MACROS = FONT_SPACED | FONT_ALTERNATING | {"UR", "UE", "MT", "ME"}
CREDITS = frozenset({"ÜBERSETZUNG", "ÜBERSETZER"})
MDOC = frozenset({"Dd", "Sh"})  # a page in the mdoc language, not read

GLYPHS = {
    "em": "—", "en": "–", "hy": "-", "mi": "-", "aq": "'", "dq": '"', "lq": "“", "rq": "”",
    "oq": "‘", "cq": "’", "Fo": "«", "Fc": "»", "fo": "‹", "fc": "›", "bu": "•", "co": "©",
    "rg": "®", "tm": "™", "mu": "×", "di": "÷", "+-": "±", "<=": "≤", ">=": "≥", "!=": "≠",
    "->": "→", "<-": "←", "de": "°", "ga": "`", "ha": "^", "ti": "~", "rs": "\\", "sl": "/",
    "ba": "|", "br": "|", "ul": "_", "sc": "§", "ps": "¶", "Eu": "€", "eu": "€", "ss": "ß",
    ":a": "ä", ":o": "ö", ":u": "ü", ":A": "Ä", ":O": "Ö", ":U": "Ü", "lA": "⇐", "rA": "⇒",
    "u2014": "—", "u2013": "–",
}
STRINGS = {"lq": "“", "rq": "”", "R": "®", "Tm": "™", "Aq": "'"}
CHAR_ESCAPES = {"-": "-", "e": "\\", "\\": "\\", ".": ".", "'": "'", "`": "`", " ": " ",
                "~": " ", "0": " ", "t": " "}
ESCAPE = re.compile(
    r"""\\(?:
      f(?:\[[^\]]*\]|\(..|.)                       # font change
    | s[+-]?(?:\(\d\d|\[\d+\]|\d)                  # size change
    | [hvwlLxXoZbDNRSCA]'[^']*'                   # escapes with a quoted argument
    | \((?P<glyph2>..)                             # \(em
    | \[(?P<glyph>[^\]]*)\]                        # \[em]
    | \*(?:\((?P<string2>..)|\[(?P<string>[^\]]*)\]|(?P<string1>.))  # \*(lq \*[lq] \*R
    | [nk](?:\(..|\[[^\]]*\]|.)                    # register reference, mark
    | (?P<char>.)
    )""",
    re.VERBOSE,
)
REQUEST = re.compile(r"""[.'][ \t]*(\S*)[ \t]*(.*)""")
ARGUMENT = re.compile(r'"((?:[^"]|"")*)"?|(\S+)')


class Block(NamedTuple):
    """One structural block of a page.

    Attributes:
        lines: its roff lines.
        text: whether its text is used (not for no-fill regions and tables).
        heading: whether it is a `.SH`/`.SS` heading (it starts a section).
    """

    lines: tuple[str, ...]
    text: bool
    heading: bool = False


def _strip_comment(line: str) -> str:
    for match in re.finditer(r"\\(.)", line):
        if match.group(1) in '"#':
            return line[: match.start()]
    return line


def _arguments(text: str) -> list[str]:
    return [match.group(2) if match.group(1) is None else match.group(1).replace('""', '"')
            for match in ARGUMENT.finditer(text)]


def roff_blocks(source: str, *, drop_credits: bool) -> list[Block]:
    """Split a roff page into its structural blocks (see the module docstring).

    Args:
        source: the page's text.
        drop_credits: drop the German credits section (`.SH ÜBERSETZUNG`, or ÜBERSETZER).

    Returns:
        The blocks in page order; [] for a page that only points at another (`.so`) and for
        one written with the mdoc macros (`.Dd`, `.Sh`), whose blocks are not split here.
    """
    joined = re.sub(r"(?<!\\)((?:\\\\)*)\\\n", r"\1", source)  # continuation lines
    blocks: list[Block] = []
    current: list[str] = []
    closing: str | None = None  # the request that ends the no-fill region we are in
    in_definition = in_credits = tag_next = False

    def flush(text: bool = True, heading: bool = False) -> None:
        if current:
            blocks.append(Block(tuple(current), text, heading))
            current.clear()

    for line in joined.split("\n"):
        if in_definition:
            in_definition = END_OF_DEFINITION.fullmatch(line) is None
            continue
        if not line.strip() and closing is None and not in_credits:
            flush()  # an empty line breaks the paragraph, as .sp does
            continue
        request = REQUEST.fullmatch(line) if line[:1] in ".'" else None
        name, arguments = (request.group(1), request.group(2)) if request else ("", "")
        if name.startswith('\\"') or name.startswith("\\#") or (request and not name):
            continue  # a comment or an empty request
        if name == "so" or name in MDOC:
            return []
        if name in DEFINITIONS:
            in_definition = True
            continue
        if name in HEADINGS:
            in_credits = drop_credits and roff_text((f".B {arguments}",)).upper() in CREDITS
        if in_credits:
            continue
        if closing is not None:
            current.append(line)
            if name == closing:
                flush(text=False)
                closing = None
        elif name in NO_FILL:
            flush()
            closing = NO_FILL[name]
            current.append(line)
        elif name in HEADINGS or name in BREAKS:
            flush()
            label = ""
            if name in HEADINGS:
                label = " ".join(_arguments(arguments))
            elif name == "IP":
                label = next(iter(_arguments(arguments)), "")
            if label.strip():  # the heading or the .IP tag, a block of its own
                current.append('.B "' + label.replace('"', '""') + '"')
                flush(heading=name in HEADINGS)
            tag_next = name in TAG_NEXT_LINE or (name in HEADINGS and not label)
        elif request and name not in INLINE_MACROS:
            continue  # .TH, .IX, .ad, .ds, .if ... carry no running text
        else:
            current.append(line)
            if tag_next:
                flush()
                tag_next = False
    flush(text=closing is None)
    return blocks


def _replace_escape(match: re.Match[str]) -> str:
    groups = match.groupdict()
    if groups["glyph2"] is not None or groups["glyph"] is not None:
        return GLYPHS.get(groups["glyph2"] or groups["glyph"] or "", "")
    string = groups["string2"] or groups["string"] or groups["string1"]
    if string is not None:
        return STRINGS.get(string, "")
    if groups["char"] is not None:
        return CHAR_ESCAPES.get(groups["char"], "")
    return ""


def roff_text(lines: tuple[str, ...]) -> str:
    """The plain text of a block's roff lines: font macros' arguments joined as roff sets
    them, escapes replaced by their characters, markup removed, whitespace normalised."""
    pieces: list[str] = []
    for raw in lines:
        line = _strip_comment(raw)
        request = REQUEST.fullmatch(line) if line[:1] in ".'" else None
        if request is None:
            pieces.append(line)
            continue
        name, arguments = request.group(1), _arguments(request.group(2))
        if name in FONT_SPACED:
            pieces.append(" ".join(arguments))
        elif name in FONT_ALTERNATING:
            pieces.append("".join(arguments))
        elif name in ("UE", "ME") and arguments and pieces:
            pieces[-1] += "".join(arguments)  # punctuation right after a link
    return normalize_space(ESCAPE.sub(_replace_escape, " ".join(pieces)))


def read_page(path: Path) -> str:
    """A man page's text (gzip-compressed or not), undecodable bytes replaced."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def _pages(roots: list[Path], subdir: Path) -> dict[str, Path]:
    pages = {}
    for root in roots:
        base = root / subdir
        for path in sorted(base.glob("man*/*")):
            if path.is_file() and not path.is_symlink():
                pages[path.relative_to(base).as_posix().removesuffix(".gz")] = path
    return pages


def align_manpages(
    en_roots: list[Path], de_roots: list[Path], source: str, counts: list[PageCounts] | None = None
) -> Iterator[Segment]:
    """Pair the blocks of every page present in English and German.

    Args:
        en_roots: the unpacked packages holding the English pages (`usr/share/man/man*/`).
        de_roots: the unpacked packages holding the German pages (`usr/share/man/de/man*/`);
            where two hold the same page, the later one's is read.
        source: the source name that starts each segment's document name.
        counts: if given, a PageCounts is appended once every page has been read.

    Yields:
        One segment per pair of text blocks (see `pair_by_position`), pages in sorted order;
        the document is `<source>/<section dir>/<page>` (e.g. manpages/man2/open.2).
    """
    en_pages = _pages(en_roots, MAN_DIR)
    de_pages = _pages(de_roots, MAN_DIR / "de")
    common = sorted(en_pages.keys() & de_pages.keys())
    whole = by_section = 0
    for page in common:
        en_blocks = roff_blocks(read_page(en_pages[page]), drop_credits=False)
        de_blocks = roff_blocks(read_page(de_pages[page]), drop_credits=True)
        pairs, paired_whole = pair_by_position(en_blocks, de_blocks, lambda b: b.heading)
        whole += paired_whole and bool(pairs)
        by_section += not paired_whole and bool(pairs)
        for en, de in pairs:
            if en.text and de.text:
                yield Segment(roff_text(de.lines), roff_text(en.lines), f"{source}/{page}")
    if counts is not None:
        counts.append(PageCounts(len(common), whole, by_section))
