"""Plain parallel text files: one sentence a line, line n of the source translates line n of
the target."""

from __future__ import annotations

import gzip
from pathlib import Path

import datasets

from seq2seq.data.dataset_dict import make_dataset_dict
from seq2seq.errors import UserError

SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "test": "test",
}


def read_lines(path: Path) -> list[str]:
    """Read a UTF-8 text file (gzip-compressed or not) as a list of lines without line ends.

    Lines are split at `\\n` only (a trailing `\\r` is removed), so other Unicode line
    separators inside a sentence never shift the line numbering.

    Raises:
        UserError: the file is missing or unreadable, or holds bytes that are not UTF-8
            (the message names the file and the line).
    """
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, EOFError) as err:
        raise UserError(f"{path}: cannot read the file ({err})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"{path} line {line}: invalid UTF-8 (byte 0x{data[err.start]:02x}); "
            "convert the file to UTF-8"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def load_files(
    *, src_files: dict[str, str] | None, tgt_files: dict[str, str] | None
) -> datasets.DatasetDict:
    """Load a corpus from parallel text files.

    Args:
        src_files: split name (train, validation or valid, test) -> source file path.
        tgt_files: the same for the target side.

    Returns:
        train/validation/test splits with columns src and tgt.

    Raises:
        UserError: a split or file is missing, a file is not UTF-8, the two sides of a split
            have different line counts, or a split is empty.
    """
    sides = {"data.src_files": _by_split(src_files, "data.src_files")}
    sides["data.tgt_files"] = _by_split(tgt_files, "data.tgt_files")
    splits: dict[str, tuple[list[str], list[str]]] = {}
    for split in ("train", "validation", "test"):
        src_path = sides["data.src_files"][split]
        tgt_path = sides["data.tgt_files"][split]
        src = read_lines(src_path)
        tgt = read_lines(tgt_path)
        if len(src) != len(tgt):
            raise UserError(
                f"{src_path} has {len(src):,} lines but {tgt_path} has {len(tgt):,}; "
                "line n of one must translate line n of the other"
            )
        if not src:
            raise UserError(f"{src_path} and {tgt_path} are empty: the {split} split has no pairs")
        splits[split] = (src, tgt)
    return make_dataset_dict(splits)


def _by_split(files: dict[str, str] | None, key: str) -> dict[str, Path]:
    if not files:
        raise UserError(f"data.source=files needs {key} with train, validation and test paths")
    paths: dict[str, Path] = {}
    for name, path in files.items():
        if name not in SPLIT_ALIASES:
            raise UserError(f"{key}.{name}: unknown split; use train, validation and test")
        paths[SPLIT_ALIASES[name]] = Path(path).expanduser()
    for split in ("train", "validation", "test"):
        if split not in paths:
            raise UserError(f"{key} has no {split} entry (a path to the {split} file)")
    return paths
