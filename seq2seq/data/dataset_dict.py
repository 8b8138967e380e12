"""The form every corpus source returns: a `datasets.DatasetDict` with string columns src, tgt."""

from __future__ import annotations

import datasets


def make_dataset_dict(
    splits: dict[str, tuple[list[str], list[str]]],
    documents: dict[str, list[str]] | None = None,
    domains: dict[str, list[str]] | None = None,
) -> datasets.DatasetDict:
    """Build a DatasetDict with columns src and tgt from (src, tgt) string lists per split, a
    column document (each pair's document, the unit its split was drawn by) and a column
    domain (each pair's domain, stored when the corpus was built) where given."""
    return datasets.DatasetDict(
        {
            name: datasets.Dataset.from_dict(
                {"src": src, "tgt": tgt,
                 **({"document": documents[name]} if documents is not None else {}),
                 **({"domain": domains[name]} if domains is not None else {})})
            for name, (src, tgt) in splits.items()
        }
    )
