"""Debian's translated package descriptions (the DDTP): `dists/<suite>/main/i18n/Translation-*`.

Each index is a deb822 file of stanzas: `Package:`, `Description-md5:` and
`Description-<lang>:`, whose first line is the short description and whose following lines
(indented by one space) are the long description; in it a line ` .` breaks paragraphs and a
line indented by two spaces is verbatim (a list, code). `Description-md5` is the md5 of the
English original, so a translated stanza joins the English stanza with the same md5 and
translates exactly its text.

The pairs: the two short descriptions, and the long descriptions' paragraphs by position where
both hold as many paragraphs (otherwise the long part is skipped). A paragraph's lines are
joined with spaces. A paragraph with a verbatim line or a bullet item (`* `, `- `, `o `) on
either side is dropped; its position still counts.

Some Korean descriptions are hard-wrapped at a fixed width, so a line may end inside a word
(`... 고대 전` / `쟁 실시간 ...`). A break between two Hangul syllables after a full line is
closed up when the translated index's own word statistics say the two pieces are one word
(`WordStats`).

The index files are checked against the sha256 sums that the suite's `Release` file lists; the
`Release` file itself is not checked against its signature.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import itertools
import lzma
import os
import re
import shutil
import unicodedata
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NamedTuple

from seq2seq.data.docs.segments import Segment, normalize_space
from seq2seq.errors import UserError

DEBIAN_MIRROR = "http://deb.debian.org/debian"
I18N_DIR = "i18n"
# The compressed forms of an index, in order of preference: the first one Release lists is
# fetched (bookworm lists Translation-en as .xz only, Translation-ko as .bz2 only).
OPENERS: dict[str, Callable[..., IO[str]]] = {".xz": lzma.open, ".bz2": bz2.open,
                                              ".gz": gzip.open}
DOWNLOAD_TIMEOUT_S = 60
# A line of at least this display width (a Hangul syllable counts two) may end inside a word:
# the hard-wrapped Korean descriptions fill their lines to 73-75 columns.
FULL_LINE_WIDTH = 72

_BULLET = re.compile(r"[*o-]\s")
_PUNCTUATION = "\"'()[]{}<>.,;:!?“”‘’"


@dataclass(frozen=True)
class IndexFile:
    """One fetched and verified description index.

    Attributes:
        name: the index, e.g. Translation-ko.
        version: the Date of the Release file that lists it.
        sha256: the hex sha256 of the (compressed) file.
        path: the file.
    """

    name: str
    version: str
    sha256: str
    path: Path

    def record(self) -> dict[str, str]:
        """The manifest entry: name, version, sha256 and the file's name."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256,
                "file": self.path.name}


def fetch_translations(
    raw_dir: Path,
    langs: Sequence[str] = ("en", "ko"),
    *,
    base_url: str = DEBIAN_MIRROR,
    suite: str = "bookworm",
) -> list[IndexFile]:
    """Download the suite's Release file and the description indexes of `langs` into
    `raw_dir/i18n/`, each only when missing, and verify the indexes against Release.

    Args:
        raw_dir: the folder of raw downloads.
        langs: the languages, e.g. ("en", "ko").
        base_url: the Debian mirror (tests pass a local server).
        suite: the suite's codename or name, e.g. bookworm.

    Returns:
        One IndexFile per language, in the order of `langs`.

    Raises:
        UserError: a download failed (naming the URL), or a file does not match Release
            (naming the file and the command that deletes it).
    """
    i18n_dir = raw_dir / I18N_DIR
    i18n_dir.mkdir(parents=True, exist_ok=True)
    suite_url = f"{base_url.rstrip('/')}/dists/{suite}"
    release = i18n_dir / "Release"
    if not release.is_file():
        _download(f"{suite_url}/Release", release)
    fields = next(_stanzas(release.read_text(encoding="utf-8").splitlines()), {})
    if suite not in (fields.get("Codename"), fields.get("Suite")):
        raise UserError(f"{release} is the Release file of {fields.get('Codename')}, not "
                        f"{suite}; delete it with `rm {release}` and run again")
    sums = _sha256_list(fields.get("SHA256", ""))
    indexes = []
    for lang in langs:
        stem = f"main/i18n/Translation-{lang}"
        entry = next((stem + suffix for suffix in OPENERS if stem + suffix in sums), None)
        if entry is None:
            raise UserError(f"{release} lists no {stem}{{{','.join(OPENERS)}}} (no "
                            f"{lang} descriptions in {suite})")
        path = i18n_dir / Path(entry).name
        if not path.is_file():
            _download(f"{suite_url}/{entry}", path)
        digest = _sha256(path)
        if digest != sums[entry]:
            raise UserError(f"{path}: sha256 {digest} differs from the {sums[entry]} that "
                            f"{release} lists (a broken or outdated download); delete both "
                            f"with `rm {path} {release}` and run again")
        indexes.append(IndexFile(f"Translation-{lang}", fields.get("Date", ""), digest, path))
    return indexes


def align_descriptions(i18n_dir: Path, source: str, lang: str = "ko") -> Iterator[Segment]:
    """The pairs of every translated description whose English original is at hand.

    Args:
        i18n_dir: the folder holding Translation-en and Translation-<lang> (`fetch_translations`).
        source: the source name that starts each segment's document name.
        lang: the translation's language.

    Yields:
        Per translated stanza, in file order: the short descriptions, then the paragraph pairs;
        the document is `<source>/<package>`.
    """
    translated = list(read_index(_index_path(i18n_dir, lang), lang))
    wanted = {description.md5 for description in translated}
    english: dict[str, Description] = {}
    for description in read_index(_index_path(i18n_dir, "en"), "en"):
        if description.md5 in wanted:
            english.setdefault(description.md5, description)
    words = WordStats.of(line for description in translated
                         for line in [description.short, *itertools.chain(*description.paragraphs)])
    for description in translated:
        original = english.get(description.md5)
        if original is None:
            continue
        for en, text in description_pairs(original, description, words):
            en, text = normalize_space(en), normalize_space(text)
            if en and text:
                yield Segment(translation=text, en=en, document=f"{source}/{description.package}")


class Description(NamedTuple):
    """One stanza of a description index.

    Attributes:
        package: the package name.
        md5: the md5 of the English original description.
        short: the short description.
        paragraphs: the long description's paragraphs, each a list of lines without the one
            space of indentation (a verbatim line keeps its extra space).
    """

    package: str
    md5: str
    short: str
    paragraphs: list[list[str]]


def read_index(path: Path, lang: str) -> Iterator[Description]:
    """The stanzas of a description index (.xz, .bz2, .gz or plain) that describe in `lang`.

    Raises:
        UserError: the file cannot be read or decompressed.
    """
    opener = OPENERS.get(path.suffix, open)
    try:
        with opener(path, "rt", encoding="utf-8") as file:
            for fields in _stanzas(file):
                text = fields.get(f"Description-{lang}")
                if text is not None and "Description-md5" in fields:
                    short, *long = text.split("\n")
                    yield Description(fields.get("Package", ""), fields["Description-md5"],
                                      short, _paragraphs(long))
    except (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read the description index ({err}); delete it with "
                        f"`rm {path}` and fetch it again") from None


def description_pairs(
    en: Description, translated: Description, words: WordStats | None = None
) -> Iterator[tuple[str, str]]:
    """The (English, translated) text pairs of one description: the short descriptions, then
    the paragraphs by position when both long descriptions hold as many, verbatim and list
    paragraphs left out."""
    yield en.short, translated.short
    if len(en.paragraphs) != len(translated.paragraphs):
        return
    for en_lines, lines in zip(en.paragraphs, translated.paragraphs, strict=True):
        if not _is_verbatim(en_lines) and not _is_verbatim(lines):
            yield join_lines(en_lines), join_lines(lines, words)


def join_lines(lines: Sequence[str], words: WordStats | None = None) -> str:
    """A paragraph's lines as one line: joined with a space, or with nothing where `words`
    says a full line ends inside a word."""
    text = lines[0].strip() if lines else ""
    for left, right in itertools.pairwise(line.strip() for line in lines):
        text += "" if words is not None and words.cut_inside_word(left, right) else " "
        text += right
    return text


@dataclass
class WordStats:
    """Word and syllable counts of a translation's lines (each line's first and last token left
    out, as they may be pieces of a word cut by the line break).

    Attributes:
        words: how often each whitespace-separated token occurs.
        syllables: how often each Hangul syllable occurs in them.
        initial: how often each syllable starts a token (punctuation stripped).
        final: how often each syllable ends a token (punctuation stripped).
    """

    words: Counter[str] = field(default_factory=Counter)
    syllables: Counter[str] = field(default_factory=Counter)
    initial: Counter[str] = field(default_factory=Counter)
    final: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, lines: Iterable[str]) -> WordStats:
        """The counts over `lines`."""
        stats = cls()
        for line in lines:
            for token in line.split()[1:-1]:
                stats.words[token] += 1
                core = token.strip(_PUNCTUATION)
                stats.syllables.update(char for char in core if _is_hangul(char))
                if core and _is_hangul(core[0]):
                    stats.initial[core[0]] += 1
                if core and _is_hangul(core[-1]):
                    stats.final[core[-1]] += 1
        return stats

    def cut_inside_word(self, left: str, right: str) -> bool:
        """Whether the break between the lines `left` and `right` cuts a word in two: `left`
        fills its line and ends with a Hangul syllable, `right` starts with one, and either
        the joined token is about as common as its pieces, or (when the counts do not tell)
        the two syllables more often sit inside a word than at its end and start."""
        if not (left and right and _is_hangul(left[-1]) and _is_hangul(right[0])
                and _width(left) >= FULL_LINE_WIDTH):
            return False
        head, tail = left.split()[-1], right.split()[0]
        joined, first, second = self.words[head + tail], self.words[head], self.words[tail]
        if joined and joined >= min(first, second):
            return True
        if not joined and first and second:
            return False
        ends = (self.final[head[-1]] + 0.5) / (self.syllables[head[-1]] + 1)
        starts = (self.initial[tail[0]] + 0.5) / (self.syllables[tail[0]] + 1)
        return ends + starts < 1


def _index_path(i18n_dir: Path, lang: str) -> Path:
    for suffix in (*OPENERS, ""):
        path = i18n_dir / f"Translation-{lang}{suffix}"
        if path.is_file():
            return path
    raise UserError(f"{i18n_dir} holds no Translation-{lang} (.xz, .bz2, .gz or plain); fetch "
                    "it first (seq2seq.data.docs.descriptions.fetch_translations)")


def _stanzas(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """The deb822 stanzas of `lines`: field -> value, continuation lines joined with newlines
    (each keeping its indentation)."""
    fields: dict[str, str] = {}
    key = ""
    for line in lines:
        text = line.rstrip("\r\n")
        if not text.strip():
            if fields:
                yield fields
            fields, key = {}, ""
        elif text[0] in " \t":
            if key:
                fields[key] += "\n" + text
        else:
            key, _, value = text.partition(":")
            fields[key] = value.strip()
    if fields:
        yield fields


def _sha256_list(text: str) -> dict[str, str]:
    """Release's SHA256 field (lines of `<sha256> <size> <path>`) as path -> sha256."""
    sums = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            sums[parts[2]] = parts[0]
    return sums


def _paragraphs(long_lines: Sequence[str]) -> list[list[str]]:
    paragraphs: list[list[str]] = [[]]
    for line in long_lines:
        text = line[1:]
        if text.rstrip() == ".":
            paragraphs.append([])
        elif text.strip():
            paragraphs[-1].append(text)
    return [paragraph for paragraph in paragraphs if paragraph]


def _is_verbatim(lines: Sequence[str]) -> bool:
    return any(line.startswith((" ", "\t")) or _BULLET.match(line) for line in lines)


def _is_hangul(char: str) -> bool:
    return "\uac00" <= char <= "\ud7a3"


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


def _download(url: str, path: Path) -> None:
    print(f"downloading {url} (into {path.parent})")
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            with tmp.open("wb") as file:
                shutil.copyfileobj(response, file)
    except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot download {url} ({' '.join(str(err).split())}); check the "
                        f"network, or fetch it by hand with `curl -o {path} {url}`") from None
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
