"""Parallel corpora: where they live, and one loader that dispatches on the configured source.

Every source returns a `datasets.DatasetDict` with the splits train, validation and test and
the string columns src and tgt. Cleaning touches the train split only; valid and test stay as
published so scores compare with other work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets

from seq2seq.config import (
    DataConfig,
    DingDataConfig,
    DocsDataConfig,
    FilesDataConfig,
    HFDataConfig,
)
from seq2seq.data.cleaning import clean_pairs
from seq2seq.data.ding import load_ding
from seq2seq.data.docs import load_docs
from seq2seq.data.export import read_export
from seq2seq.data.files import load_files
from seq2seq.data.hf import load_hf
from seq2seq.errors import UserError

SPLITS = ("train", "validation", "test")


def data_root(root: str | None) -> Path:
    """The folder that holds built corpora and tokenizers.

    Args:
        root: a user-given folder, or None for `<project root>/data`.
    """
    if root is None:
        return Path(__file__).resolve().parents[2] / "data"
    return Path(root).expanduser().resolve()


def _ding(cfg: DingDataConfig, root: Path) -> datasets.DatasetDict:
    return load_ding(
        raw_path=cfg.raw_path,
        root=root,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
        phrase_pairs=cfg.phrase_pairs,
    )


def _hf(cfg: HFDataConfig, root: Path) -> datasets.DatasetDict:
    return load_hf(
        path=cfg.hf_path,
        config=cfg.hf_config,
        revision=cfg.hf_revision,
        data_files=cfg.hf_data_files,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
    )


def _files(cfg: FilesDataConfig, root: Path) -> datasets.DatasetDict:
    return load_files(src_files=cfg.src_files, tgt_files=cfg.tgt_files)


def _docs(cfg: DocsDataConfig, root: Path) -> datasets.DatasetDict:
    return load_docs(
        root=root,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
        sources=list(cfg.docs_sources),
        allow_missing=cfg.allow_missing,
        test_buckets=dict(cfg.test_buckets),
    )


# data.source -> the loader of that source's config (DingDataConfig for ding, ...)
LOADERS: dict[str, Callable[[Any, Path], datasets.DatasetDict]] = {
    "ding": _ding,
    "hf": _hf,
    "files": _files,
    "docs": _docs,
}


def load_source(cfg: DataConfig) -> datasets.DatasetDict:
    """The splits of the corpus `cfg` names, before cleaning: from the export in
    `data.export_dir` when one is given (seq2seq.data.export: no raw source is read), else
    from the source `data.source`."""
    root = data_root(cfg.root)
    export_dir = getattr(cfg, "export_dir", None)  # absent from configs saved before it
    if export_dir is not None:
        return read_export(cfg, Path(export_dir).expanduser(), root)
    loader = LOADERS.get(str(cfg.source))
    if loader is None:
        raise UserError(f"data.source={cfg.source!r} is unknown; use {', '.join(LOADERS)}")
    return loader(cfg, root)


def load_corpus(cfg: DataConfig) -> datasets.DatasetDict:
    """Load the corpus `cfg` names, clean its train split and print what it holds.

    Args:
        cfg: the config of one source, the schema its configs/data/*.yaml picks
            (DingDataConfig, HFDataConfig, FilesDataConfig or DocsDataConfig).

    Returns:
        train/validation/test splits, columns src and tgt (strings), in the configured direction.
    """
    return clean_corpus(cfg, load_source(cfg))


def clean_corpus(
    cfg: DataConfig, corpus: datasets.DatasetDict, verbose: bool = True
) -> datasets.DatasetDict:
    """The corpus with its train split cleaned (data.max_words, max_ratio, max_train_pairs);
    `verbose` prints the counts."""
    train = corpus["train"]
    keep, dropped = clean_pairs(
        train["src"], train["tgt"], max_words=cfg.max_words, max_ratio=cfg.max_ratio
    )
    if cfg.max_train_pairs is not None:
        keep = keep[: cfg.max_train_pairs]
    if len(keep) < len(train):
        corpus = datasets.DatasetDict({**corpus, "train": train.select(keep)})
    if len(corpus["train"]) == 0:
        raise UserError(
            f"corpus {cfg.name}: no training pairs are left after cleaning "
            f"(dropped: {_format_counts(dropped)}); check data.max_words and data.max_ratio"
        )

    counts = " / ".join(f"{name} {len(corpus[name]):,}" for name in SPLITS)
    if verbose:
        print(
            f"corpus {cfg.name} ({cfg.src_lang}->{cfg.tgt_lang}): {counts} pairs; "
            f"train cleaning dropped {_format_counts(dropped)}"
            + (f", kept the first {cfg.max_train_pairs:,}" if cfg.max_train_pairs is not None
               else "")
        )
    return corpus


def _format_counts(dropped: dict[str, int]) -> str:
    return ", ".join(f"{reason} {count:,}" for reason, count in dropped.items())
