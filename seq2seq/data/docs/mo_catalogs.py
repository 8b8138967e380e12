"""LibreOffice's interface catalogs (libreoffice-l10n-de, libreoffice-l10n-ko): gettext `.mo` files.

A `.mo` catalog maps each original (`msgid`, here the English) to its translation (`msgstr`,
the German or Korean). GNU format: a header of 32-bit integers (magic 0x950412de in the file's byte
order, revision, string count N, offset of the originals table, offset of the translations
table), then two tables of N (length, offset) pairs pointing at the strings. An original may
start with a context and `\\x04` (`optfltrpage|label1\\x04Settings`); a plural entry holds its
forms separated by NUL, of which the singular is kept. The entry with an empty msgid is the
catalog's header and is skipped. LibreOffice marks a menu accelerator with `~` (`~Ignore`) and,
in the strings of `.ui` dialog files, a mnemonic with `_` (`Righ_t/Bottom`); both marks are
removed, and the Korean side's bracketed accelerators (`저장(~S)`; seq2seq.data.docs.accelerators).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from seq2seq.data.docs.accelerators import strip_bracketed, strip_marks
from seq2seq.data.docs.segments import Segment, normalize_space
from seq2seq.errors import UserError

CATALOG_DIR = "usr/lib/libreoffice/program/resource/{lang}/LC_MESSAGES"
MAGIC = 0x950412DE
MARKS = "~"  # every string's
UI_MARKS = "~_"  # a `.ui` dialog string's (its context names the file: `optfltrpage|label1`)


def read_mo(path: Path) -> list[tuple[str, str, str]]:
    """The entries of one `.mo` catalog, in file order.

    Returns:
        (context, original, translation) triples; the context is "" when the entry has none.

    Raises:
        UserError: the file is not a GNU `.mo` catalog.
    """
    data = path.read_bytes()
    for order in ("<", ">"):
        if len(data) >= 20 and struct.unpack_from(f"{order}I", data)[0] == MAGIC:
            break
    else:
        raise UserError(f"{path}: not a gettext .mo catalog (bad magic number)")
    _, count, originals, translations = struct.unpack_from(f"{order}4I", data, 4)
    entries = []
    try:
        for index in range(count):
            original = _string(data, order, originals + 8 * index)
            translation = _string(data, order, translations + 8 * index)
            context, _, msgid = original.rpartition("\x04")
            entries.append((context, msgid.split("\0")[0], translation.split("\0")[0]))
    except (struct.error, UnicodeDecodeError) as err:
        raise UserError(f"{path}: damaged .mo catalog ({err})") from None
    return entries


def _string(data: bytes, order: str, entry: int) -> str:
    length, offset = struct.unpack_from(f"{order}2I", data, entry)
    if offset + length > len(data):
        raise struct.error(f"string at {offset} runs past the end of the file")
    return data[offset : offset + length].decode("utf-8")


def align_catalogs(root: Path, source: str, lang: str = "de") -> Iterator[Segment]:
    """Every translated entry of one language's interface catalogs.

    Args:
        root: the unpacked libreoffice-l10n-<lang> (holding `usr/...`).
        source: the source name that starts each segment's document name.
        lang: the catalogs' language folder (`de`, `ko`).

    Yields:
        One segment per entry with a non-empty msgid and msgstr, catalogs in sorted order.
        A dialog's strings form one document, `<source>/<catalog>/<.ui file>` (the context
        `optfltrpage|label1` names optfltrpage.ui); any other string is a document of its own,
        `<source>/<catalog>/<context>` (`STR_PROMPT`).
    """
    for path in sorted((root / CATALOG_DIR.format(lang=lang)).glob("*.mo")):
        for context, msgid, msgstr in read_mo(path):
            if not msgid or not msgstr:
                continue
            marks = UI_MARKS if "|" in context else MARKS
            yield Segment(
                normalize_space(strip_marks(strip_bracketed(msgstr), marks)),
                normalize_space(strip_marks(msgid, marks)),
                f"{source}/{path.stem}/{context.split('|', 1)[0] or msgid}",
            )
