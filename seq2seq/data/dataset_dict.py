"""The form every corpus source returns: a `datasets.DatasetDict` with string columns src, tgt."""

from __future__ import annotations

import datasets


def make_dataset_dict(
    splits: dict[str, tuple[list[str], list[str]]],
    documents: dict[str, list[str]] | None = None,
) -> datasets.DatasetDict:
    """Build a DatasetDict with columns src and tgt from (src, tgt) string lists per split, and
    a column document (each pair's document, the unit its split was drawn by) where given."""
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {"src": src, "tgt": tgt,
                 **({"document": documents[name]} if documents is not None else {})})
            for name, (src, tgt) in splits.items()
        }
    )
