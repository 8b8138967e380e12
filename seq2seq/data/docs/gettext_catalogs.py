"""Korean gettext catalogs of games and desktop programs (Cataclysm: DDA, Wesnoth, Widelands,
GNOME and KDE programs): each `.mo` maps an English msgid to its Korean msgstr.

A catalog can hold thousands of messages (Cataclysm: DDA's one `.mo` holds 16,225), too many
for one document of the split, and most have no message context to cut them by. The unit is
a block: within one catalog and message context, the messages in msgid order (the order of a
`.mo`'s table) cut into runs of BLOCK. Messages that begin alike (the variants of one line,
"You hear a loud bang." and "You hear a loud bang!") are neighbours in that order and fall in
one block, so they go to one split; the near twins that still straddle blocks are removed from
validation and test by the build (`filters.remove_train_twins`).

Interface catalogs (menus, dialogs) lose their accelerators, `_New Game` and `게임(_N)`
(seq2seq.data.docs.accelerators: only where the mark is one); stories keep every `_` and `&`
(`R&D`, `file_name`). Wesnoth's `context^` prefixes (`race^Human`) go everywhere, and HTML
entities are decoded (`&amp;` is `&`: Pango and Qt render these strings as markup).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from seq2seq.data.docs.accelerators import strip_interface_pair
from seq2seq.data.docs.mo_catalogs import read_mo
from seq2seq.data.docs.segments import Segment, normalize_space, unescape_entities

BLOCK = 40  # messages a document
_CONTEXT_PREFIX = re.compile(r"^[\w ]+\^")  # Wesnoth: "race^Human", "female^Guard"


@dataclass(frozen=True)
class Catalogs:
    """Where one package keeps its Korean catalogs.

    Attributes:
        package: the Debian package.
        pattern: a glob, relative to the unpacked root, matching its Korean `.mo` files.
        include: the catalogs (stems: file names less `.mo`) to read, as fnmatch patterns.
        exclude: the catalogs to leave out of those, as fnmatch patterns.
    """

    package: str
    pattern: str
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()

    def reads(self, stem: str) -> bool:
        """Whether the catalog `stem` is one of these."""
        return (any(fnmatch(stem, p) for p in self.include)
                and not any(fnmatch(stem, p) for p in self.exclude))


def align_gettext(
    roots: dict[str, Path], source: str, catalogs: Sequence[Catalogs], interface: bool = False
) -> Iterator[Segment]:
    """Every translated message of the named catalogs, as (Korean, English) segments.

    Args:
        roots: package name -> its unpacked root (holding `usr/...`).
        source: the source name that starts each document name.
        catalogs: the packages and globs to read, in order.
        interface: the catalogs are menus and dialogs, whose accelerators go.

    Yields:
        One segment per message with a non-empty msgid and msgstr, document
        `<source>/<catalog>/<context or ->/<block>` (the module docstring).
    """
    for spec in catalogs:
        for path in sorted(roots[spec.package].glob(spec.pattern)):
            stem = path.name.removesuffix(".mo")
            if not spec.reads(stem):
                continue
            by_context: dict[str, list[tuple[str, str]]] = defaultdict(list)
            for context, msgid, msgstr in read_mo(path):
                if msgid and msgstr:
                    by_context[context].append((msgid, msgstr))
            for context, messages in sorted(by_context.items()):
                for index, (msgid, msgstr) in enumerate(sorted(messages)):
                    en, translation = (unescape_entities(_CONTEXT_PREFIX.sub("", msgid)),
                                       unescape_entities(_CONTEXT_PREFIX.sub("", msgstr)))
                    if interface:
                        en, translation = strip_interface_pair(en, translation)
                    yield Segment(normalize_space(translation), normalize_space(en),
                                  f"{source}/{stem}/{context or '-'}/{index // BLOCK:03d}")
