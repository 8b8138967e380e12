"""The form every corpus source returns: a `datasets.DatasetDict` with string columns src, tgt."""

from __future__ import annotations

import datasets


def make_dataset_dict(splits: dict[str, tuple[list[str], list[str]]]) -> datasets.DatasetDict:
    """Build a DatasetDict with columns src and tgt from (src, tgt) string lists per split."""
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict({"src": src, "tgt": tgt})
            for name, (src, tgt) in splits.items()
        }
    )
