"""The model variants and the builder the entry points call."""

from __future__ import annotations

from hydra.utils import instantiate
from torch import nn

from seq2seq.models.base import count_parameters


def build_model(model_cfg: object, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module:
    """Instantiate the model a config names (its `_target_`) and print its size.

    Args:
        model_cfg: a composed model config (DictConfig) or one of the model config dataclasses.
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size.

    Returns:
        The model, on the CPU, in training mode.
    """
    model = instantiate(model_cfg, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    print(f"model: {model.name}, {count_parameters(model) / 1e6:.2f}M parameters")
    return model
