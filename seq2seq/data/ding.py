"""The Ding German-English dictionary (Debian package trans-de-en) as a sentence-pair corpus.

The file is UTF-8; `#` lines are headers, every other line is `GERMAN :: ENGLISH`, and each side
holds ` | `-separated sub-entries, the n-th German one translating the n-th English one.
The canonical extraction (keep it exactly, so that figures compare across tools):
1. For each line not starting with `#` that contains ` :: `, split at the first ` :: `.
2. Split each side on ` | `; skip the line if the counts differ; pair sub-entries by position.
3. Strip whitespace and NFC-normalize each side.
4. Keep a pair only if both sides end with `.`, `!` or `?`, start with an uppercase character,
   contain none of `/ ; [ ] { } < > ( ) ~`, and have at least 2 whitespace-separated words.
5. Deduplicate exact (de, en) pairs and sort them.
6. Split by `int(md5(de.encode("utf-8")).hexdigest(), 16) % 100`: 0-4 test, 5-9 validation,
   10-99 train.
With trans-de-en 1.9-6 this yields 14,735 pairs (753 test, 753 validation, 13,229 train).
Optional phrase pairs (train only) are sub-entry pairs that pass the character filter and have
at least 2 words a side, but are not sentence pairs, and whose German side is no validation or
test German sentence.
The built corpus is cached under `<data root>/ding/`, keyed by the raw file's content and the
extraction version.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import subprocess
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import datasets

from seq2seq.data.dataset_dict import make_dataset_dict
from seq2seq.data.files import read_lines
from seq2seq.errors import UserError

EXTRACTION_VERSION = 1
SYSTEM_RAW_PATH = Path("/usr/share/trans/de-en")
PACKAGE = "trans-de-en"
FORBIDDEN_CHARS = frozenset("/;[]{}<>()~")
SENTENCE_END = (".", "!", "?")
SPLITS = ("train", "validation", "test")

Pair = tuple[str, str]  # (German, English)


@dataclass
class DingCorpus:
    """The extracted pairs, German first, before a direction is chosen.

    Attributes:
        splits: train/validation/test -> sorted (de, en) sentence pairs.
        phrases: sorted (de, en) phrase pairs, for the train split only.
        raw_path: the dictionary file read.
        package_version: the Debian package version, e.g. "1.9-6", if it could be found.
        file_version: the file's own `# Version ::` header, if any.
    """

    splits: dict[str, list[Pair]]
    phrases: list[Pair]
    raw_path: str
    package_version: str | None
    file_version: str | None


def sub_entry_pairs(lines: Iterable[str]) -> Iterable[Pair]:
    """Steps 1-3 above: every (de, en) sub-entry pair, stripped and NFC-normalized.

    Header lines (`#`) and lines without ` :: ` are skipped, and so is a line whose two sides
    hold different numbers of ` | `-separated sub-entries.
    """
    for line in lines:
        if line.startswith("#") or " :: " not in line:
            continue
        de_side, en_side = line.split(" :: ", 1)
        de_entries = de_side.split(" | ")
        en_entries = en_side.split(" | ")
        if len(de_entries) != len(en_entries):
            continue
        for de, en in zip(de_entries, en_entries, strict=True):
            yield (
                unicodedata.normalize("NFC", de.strip()),
                unicodedata.normalize("NFC", en.strip()),
            )


def is_plain(text: str) -> bool:
    """The character and length rules: none of `/ ; [ ] { } < > ( ) ~` and at least 2 words."""
    return FORBIDDEN_CHARS.isdisjoint(text) and len(text.split()) >= 2


def is_sentence(text: str) -> bool:
    """Step 4: ends with . ! or ?, starts with an uppercase character, and is plain."""
    return text.endswith(SENTENCE_END) and text[:1].isupper() and is_plain(text)


def extract_sentence_pairs(lines: Iterable[str]) -> list[Pair]:
    """Steps 1-5: the deduplicated, sorted (de, en) pairs whose both sides are sentences."""
    return sorted(
        {(de, en) for de, en in sub_entry_pairs(lines) if is_sentence(de) and is_sentence(en)}
    )


def split_of(de: str) -> str:
    """Step 6: the split a pair belongs to, from the md5 of its German side."""
    bucket = int(hashlib.md5(de.encode("utf-8"), usedforsecurity=False).hexdigest(), 16) % 100
    if bucket < 5:
        return "test"
    if bucket < 10:
        return "validation"
    return "train"


def split_pairs(pairs: Iterable[Pair]) -> dict[str, list[Pair]]:
    """Step 6 over a list of pairs; the order within each split is kept."""
    splits: dict[str, list[Pair]] = {name: [] for name in SPLITS}
    for pair in pairs:
        splits[split_of(pair[0])].append(pair)
    return splits


def extract_phrase_pairs(
    lines: Iterable[str], sentences: list[Pair], held_out_de: set[str]
) -> list[Pair]:
    """The optional training-only phrase pairs (see the module docstring).

    Args:
        lines: the dictionary lines.
        sentences: the sentence pairs already extracted (never repeated as phrases).
        held_out_de: the German sides of the validation and test pairs; a phrase pair with one
            of them as its German side is left out.

    Returns:
        Sorted, deduplicated (de, en) pairs whose both sides pass the character filter and have
        at least 2 words.
    """
    taken = set(sentences)
    phrases = {
        (de, en)
        for de, en in sub_entry_pairs(lines)
        if is_plain(de) and is_plain(en) and de not in held_out_de
    }
    return sorted(phrases - taken)


def find_raw_file(raw_path: str | None, root: Path) -> Path:
    """Locate the Ding file: the given path, the installed package, or a local unpacked copy.

    Without any of them, the package is fetched with `apt-get download` into `<root>/raw` and
    unpacked there with `dpkg -x` (no root rights needed).

    Raises:
        UserError: the given path does not exist, or the package could not be fetched.
    """
    if raw_path is not None:
        path = Path(raw_path).expanduser()
        if not path.is_file():
            raise UserError(f"data.raw_path={raw_path}: no such file")
        return path
    local = root / "raw" / "usr" / "share" / "trans" / "de-en"
    for path in (SYSTEM_RAW_PATH, local):
        if path.is_file():
            return path
    return _download(root / "raw", local)


def _download(raw_dir: Path, expected: Path) -> Path:
    raw_dir.mkdir(parents=True, exist_ok=True)
    print(f"fetching the Ding dictionary: apt-get download {PACKAGE} (into {raw_dir})")
    try:
        subprocess.run(
            ["apt-get", "download", PACKAGE],
            cwd=raw_dir,
            check=True,
            capture_output=True,
            text=True,
        )
        debs = sorted(raw_dir.glob(f"{PACKAGE}_*.deb"), key=os.path.getmtime)
        if not debs:
            raise FileNotFoundError(f"apt-get download left no {PACKAGE}_*.deb")
        subprocess.run(
            ["dpkg", "-x", str(debs[-1]), str(raw_dir)], check=True, capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError) as err:
        stderr = getattr(err, "stderr", None)
        detail = stderr.strip().splitlines()[-1] if stderr and stderr.strip() else str(err)
        raise UserError(
            f"the Ding dictionary ({SYSTEM_RAW_PATH}) is missing and could not be fetched "
            f"({detail}). Install it with `apt-get install {PACKAGE}` (as root), or "
            "download de-en.txt.gz from the Ding project (https://dict.tu-chemnitz.de/, "
            "ftp.tu-chemnitz.de/pub/Local/urz/ding/de-en/) and pass data.raw_path=PATH"
        ) from None
    if not expected.is_file():
        raise UserError(f"unpacking {debs[-1]} gave no {expected}; pass data.raw_path=PATH")
    return expected


def package_version(raw: Path) -> str | None:
    """The Debian version of trans-de-en that holds `raw`, from the changelog beside it.

    Works for the installed package and for a `dpkg -x` copy (`.../usr/share/trans/de-en` next
    to `.../usr/share/doc/trans-de-en/changelog.Debian.gz`); else the name of a .deb in the
    unpack folder; else None.
    """
    if len(raw.parents) >= 4:
        changelog = raw.parents[1] / "doc" / PACKAGE / "changelog.Debian.gz"
        try:
            with gzip.open(changelog, "rt", encoding="utf-8") as file:
                match = re.match(rf"{PACKAGE} \(([^)]+)\)", file.readline())
            if match:
                return match.group(1)
        except (OSError, EOFError, UnicodeDecodeError):
            pass
        debs = sorted(raw.parents[3].glob(f"{PACKAGE}_*_all.deb"))
        if debs:
            return debs[-1].name.split("_")[1]
    return None


def build_ding(raw_path: str | None, root: Path) -> DingCorpus:
    """Extract (or reuse from the cache) the Ding sentence pairs and phrase pairs.

    Args:
        raw_path: the Ding file (plain or gzip); None looks for it (see `find_raw_file`).
        root: the data root; the cache is `<root>/ding/v<version>-<content hash>/corpus.json`.
    """
    raw = find_raw_file(raw_path, root)
    lines = read_lines(raw)
    digest = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
    cache = root / "ding" / f"v{EXTRACTION_VERSION}-{digest[:16]}" / "corpus.json"
    if cache.is_file():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        corpus = DingCorpus(
            splits={name: [tuple(p) for p in pairs] for name, pairs in stored["splits"].items()},
            phrases=[tuple(p) for p in stored["phrases"]],
            raw_path=str(raw),
            package_version=stored["package_version"],
            file_version=stored["file_version"],
        )
        source = f"reusing {cache.parent}"
    else:
        sentences = extract_sentence_pairs(lines)
        splits = split_pairs(sentences)
        held_out = {de for name in ("validation", "test") for de, _ in splits[name]}
        corpus = DingCorpus(
            splits=splits,
            phrases=extract_phrase_pairs(lines, sentences, held_out),
            raw_path=str(raw),
            package_version=package_version(raw),
            file_version=_file_version(lines),
        )
        cache.parent.mkdir(parents=True, exist_ok=True)
        stored = {
            "extraction_version": EXTRACTION_VERSION,
            "raw_sha256": digest,
            "raw_path": str(raw),
            "package_version": corpus.package_version,
            "file_version": corpus.file_version,
            "splits": corpus.splits,
            "phrases": corpus.phrases,
        }
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(stored, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, cache)
        source = f"built {cache.parent}"
    counts = ", ".join(f"{name} {len(corpus.splits[name]):,}" for name in SPLITS)
    total = sum(len(pairs) for pairs in corpus.splits.values())
    print(
        f"Ding dictionary {raw} (package {PACKAGE} {corpus.package_version or 'unknown'}, "
        f"file version {corpus.file_version or 'unknown'}): {total:,} sentence pairs "
        f"({counts}), {len(corpus.phrases):,} phrase pairs; {source}"
    )
    return corpus


def _file_version(lines: list[str]) -> str | None:
    for line in lines:
        if not line.startswith("#"):
            return None
        if line.startswith("# Version :: "):
            return line[len("# Version :: ") :].strip()
    return None


def load_ding(
    *, raw_path: str | None, root: Path, src_lang: str, tgt_lang: str, phrase_pairs: bool
) -> datasets.DatasetDict:
    """The Ding corpus in the direction src_lang -> tgt_lang (de->en or en->de).

    Args:
        raw_path: the Ding file, or None to find or fetch it.
        root: the data root (cache and download folder).
        src_lang: "de" or "en".
        tgt_lang: the other one.
        phrase_pairs: append the phrase pairs to the train split (never to validation or test).
    """
    if {src_lang, tgt_lang} != {"de", "en"} or src_lang == tgt_lang:
        raise UserError(
            f"the Ding corpus is German-English: data.src_lang={src_lang} and "
            f"data.tgt_lang={tgt_lang} must be de and en (either way round)"
        )
    corpus = build_ding(raw_path, root)
    splits: dict[str, tuple[list[str], list[str]]] = {}
    for name in SPLITS:
        pairs = corpus.splits[name] + (corpus.phrases if name == "train" and phrase_pairs else [])
        de = [p[0] for p in pairs]
        en = [p[1] for p in pairs]
        splits[name] = (de, en) if src_lang == "de" else (en, de)
    return make_dataset_dict(splits)
