"""The model variants and the builder the entry points call."""

from __future__ import annotations

from hydra.utils import instantiate
from torch import nn


def build_model(model_cfg: object, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module:
    """Instantiate the model a config names (its `_target_`).

    Args:
        model_cfg: a composed model config (DictConfig) or one of the model config dataclasses.
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size.

    Returns:
        The model, on the CPU, in training mode.
    """
    return instantiate(model_cfg, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)


def is_recurrent(model_cfg: object) -> bool:
    """Whether the model a config names steps a recurrent cell (vanilla, Bahdanau, Luong): the
    RNN configs name one (`cell: gru | lstm`), the Transformer has none."""
    return "cell" in model_cfg  # type: ignore[operator]
