"""Corpora from the Hugging Face hub (or a local folder laid out like the hub's parquet export).

Records follow the hub's translation schema, `{"translation": {"de": ..., "en": ...}}`.
`IWSLT/iwslt2017` is a script-based repository, and `datasets` 4+ no longer runs loading
scripts, so it is read through the hub's automatic parquet export (revision
`refs/convert/parquet`), which holds one folder per config and one per split inside it:
`iwslt2017-de-en/train/0000.parquet`, `iwslt2017-de-en/validation/...`, `.../test/...`.
"""

from __future__ import annotations

import re
from pathlib import Path

import datasets

from seq2seq.data.dataset_dict import make_dataset_dict
from seq2seq.errors import UserError

PARQUET_REVISION = "refs/convert/parquet"
SPLITS = ("train", "validation", "test")


def parquet_export_files(config: str) -> dict[str, str]:
    """The data_files patterns of one config in the hub's parquet export layout."""
    return {split: f"{config}/{split}/*.parquet" for split in SPLITS}


def load_hf(
    *,
    path: str,
    config: str | None,
    revision: str | None,
    data_files: dict[str, str] | None,
    src_lang: str,
    tgt_lang: str,
) -> datasets.DatasetDict:
    """Load a translation dataset and map it to src/tgt columns.

    Which files are read:
    - `data_files` given: exactly those patterns (split -> pattern, relative to the dataset).
    - else, `config` given and `revision` is the parquet export (`refs/convert/parquet`, or a
      pinned 40-hex commit of it) or `path` is a local folder: the export's layout for that
      config (`parquet_export_files`).
    - else: `load_dataset(path, name=config, revision=revision)`.

    Args:
        path: a hub dataset id such as `IWSLT/iwslt2017`, or a local folder.
        config: the dataset config, e.g. `iwslt2017-de-en`.
        revision: a branch, tag or commit of the hub repository.
        data_files: split -> file pattern, overriding the config's layout.
        src_lang: the source language key in the translation records.
        tgt_lang: the target language key.

    Raises:
        UserError: the dataset cannot be fetched or read, lacks a split, or its records lack
            one of the languages.
    """
    local = Path(path).expanduser().is_dir()
    if data_files is None and config is not None:
        pinned = revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision) is not None
        if local or revision == PARQUET_REVISION or pinned:
            data_files = parquet_export_files(config)
    kwargs: dict[str, object] = {"revision": None if local else revision}
    if data_files is not None:
        kwargs["data_files"] = dict(data_files)
    else:
        kwargs["name"] = config
    where = f"{path} ({config})" if config else path
    try:
        raw = datasets.load_dataset(str(Path(path).expanduser()) if local else path, **kwargs)
    except Exception as err:  # any fetch or read failure: network, offline, missing files
        message = str(err).strip()
        reason = (
            f"{type(err).__name__}: {message.splitlines()[0]}" if message else type(err).__name__
        )
        if local:
            raise UserError(f"could not read dataset {where}: {reason}") from None
        raise UserError(
            f"could not fetch dataset {where} from the Hugging Face hub: {reason}. Fetch it once "
            "with network access (`python -m seq2seq.prepare data=<this data config>`; it is "
            "cached afterwards, also for HF_DATASETS_OFFLINE=1 runs), or use data=files with "
            "local text files."
        ) from None
    aliases = {"valid": "validation", "dev": "validation"}
    raw = datasets.DatasetDict({aliases.get(name, name): split for name, split in raw.items()})
    splits: dict[str, tuple[list[str], list[str]]] = {}
    for split in SPLITS:
        if split not in raw:
            raise UserError(f"dataset {where} has no {split} split (it has: {', '.join(raw)})")
        splits[split] = _translation_columns(raw[split], src_lang, tgt_lang, f"{where} {split}")
    return make_dataset_dict(splits)


def _translation_columns(
    split: datasets.Dataset, src_lang: str, tgt_lang: str, where: str
) -> tuple[list[str], list[str]]:
    if "translation" not in split.column_names:
        raise UserError(
            f"dataset {where}: no 'translation' column (columns: {', '.join(split.column_names)})"
        )
    src: list[str] = []
    tgt: list[str] = []
    for row, record in enumerate(split["translation"]):
        if src_lang not in record or tgt_lang not in record:
            raise UserError(
                f"dataset {where} row {row}: the translation record has languages "
                f"{', '.join(record)}, not {src_lang} and {tgt_lang}"
            )
        src.append(record[src_lang] or "")
        tgt.append(record[tgt_lang] or "")
    return src, tgt
