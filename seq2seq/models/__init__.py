"""The model variants and the builder the entry points call."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn


def build_model(model_cfg: object, src_vocab_size: int, tgt_vocab_size: int,
                alignment: tuple[int, int | None] | None = None) -> nn.Module:
    """Instantiate the model a config names (its `_target_`).

    Args:
        model_cfg: a composed model config (DictConfig) or one of the model config dataclasses.
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size.
        alignment: the Transformer's cross-attention it is read by, (decoder layer, head or
            None for the mean): the one guided alignment trains (`guided_alignment`); None:
            the default (the last layer's mean).

    Returns:
        The model, on the CPU, in training mode.
    """
    model = instantiate(model_cfg, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    if alignment is not None and hasattr(model, "read_alignment"):
        model.read_alignment(*alignment)
    return model


def guided_alignment(config: DictConfig) -> tuple[int, int | None] | None:
    """The Transformer (layer, head) that guided alignment trains, from a run's config (head
    None: the mean over heads; layer -1: the last); None without guidance or for the RNNs,
    whose one attention is what `forward` returns. The model is built to be read by it."""
    t = config.trainer
    if float(t.get("alignment_weight", 0.0)) <= 0 or config.model.name != "transformer":
        return None
    return int(t.get("alignment_layer", -1)), t.get("alignment_head")


def is_recurrent(model_cfg: object) -> bool:
    """Whether the model a config names steps a recurrent cell (vanilla, Bahdanau, Luong): the
    RNN configs name one (`cell: gru | lstm`), the Transformer has none."""
    return "cell" in model_cfg  # type: ignore[operator]
