"""Load a trained checkpoint for inference: the one loader `evaluate` and `translate` share.

A run folder keeps the tokenizer next to its checkpoints (`<run>/tokenizer`,
`<run>/checkpoints/best.pt`); the checkpoint records the tokenizer's identity and the resolved
config, so the model is rebuilt exactly and a mismatched tokenizer is refused. Several
checkpoints sharing one tokenizer load as one `Ensemble` (`load_models`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from seq2seq.checkpoint import check_tokenizer, load_checkpoint
from seq2seq.config import Config
from seq2seq.decoding import DecodeSettings, decode_settings
from seq2seq.errors import UserError
from seq2seq.models import build_model, guided_alignment
from seq2seq.models.ensemble import Ensemble
from seq2seq.runtime import pick_device
from seq2seq.tokenization import Tokenizer


@dataclass
class Loaded:
    """A checkpoint ready to decode.

    Attributes:
        model: the model, in eval mode, on `device`.
        tokenizer: the tokenizer the model was trained with.
        config: the run's resolved config (data, tokenizer, model, trainer, decoding, ...).
        checkpoint: the checkpoint file it came from.
        device: where the model lives.
        step: the optimizer updates the weights had seen, or None when not recorded.
        members: an ensemble's checkpoints (`load_models`), the first being `checkpoint`;
            empty for a single model.
        history: the training's evaluations recorded in the checkpoint, one row each (the
            validation AER per Transformer layer among them); empty when not recorded.
    """

    model: nn.Module
    tokenizer: Tokenizer
    config: DictConfig
    checkpoint: Path
    device: torch.device
    step: int | None = None
    members: tuple[Path, ...] = ()
    history: list[dict] = field(default_factory=list)


def resolve_device(name: str) -> torch.device:
    """auto (cuda > mps > cpu) or a torch device name; a bad name is a UserError."""
    try:
        device = pick_device(name)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available on this machine")
    except RuntimeError as err:
        raise UserError(f"device={name!r}: {str(err).splitlines()[0]}") from None
    return device


def run_tokenizer_dir(ckpt: Path | str) -> Path:
    """Where a run folder keeps the tokenizer of `<run>/checkpoints/<name>.pt`."""
    return Path(ckpt).parent.parent / "tokenizer"


def schema_config(payload: dict, path: Path) -> DictConfig:
    """The checkpoint's config checked against the schema (older checkpoints get defaults)."""
    if not isinstance(payload.get("config"), dict) or "tokenizer" not in payload:
        raise UserError(f"{path}: not a training checkpoint (no config or tokenizer identity)")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(Config), payload["config"])
    except OmegaConfBaseException as err:
        reason = str(err).strip().splitlines()[0]
        raise UserError(f"{path}: the config inside does not fit this version ({reason})") from None
    assert isinstance(cfg, DictConfig)
    return cfg


def load_for_inference(
    ckpt: Path | str, device: torch.device | str, tokenizer_dir: Path | str | None = None
) -> Loaded:
    """Load a checkpoint (weights only), its tokenizer and its model, ready to decode.

    Args:
        ckpt: a checkpoint written by training, e.g. `<run>/checkpoints/best.pt`.
        device: where to put the model.
        tokenizer_dir: the tokenizer folder; None: `<run>/tokenizer` next to the checkpoints.

    Returns:
        The model in eval mode on `device`, its tokenizer and config.

    Raises:
        UserError: the checkpoint is missing or unreadable, the tokenizer folder is missing or
            is not the one the checkpoint was trained with, or the weights do not fit the model
            the checkpoint's config describes. The message names the path.
    """
    path = Path(ckpt)
    device = torch.device(device)
    payload = load_checkpoint(path, map_location="cpu")
    cfg = schema_config(payload, path)
    tok_dir = Path(tokenizer_dir) if tokenizer_dir is not None else run_tokenizer_dir(path)
    if not tok_dir.is_dir():
        raise UserError(
            f"{tok_dir}: tokenizer folder not found (checkpoint {path} needs the tokenizer its "
            "run saved; pass tokenizer_dir=DIR)"
        )
    tokenizer = Tokenizer.load(tok_dir)
    check_tokenizer(payload, tokenizer, path, tok_dir)
    try:
        model = build_model(
            OmegaConf.create(payload["config"]["model"]),
            tokenizer.src_vocab_size,
            tokenizer.tgt_vocab_size,
            alignment=guided_alignment(cfg),  # what it was guided on, it is read by
        )
    except (InstantiationException, OmegaConfBaseException, KeyError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path}: cannot build the model its config describes ({reason})") from None
    try:
        model.load_state_dict(payload["model"], strict=True)
    except RuntimeError as err:
        details = [ln.strip() for ln in str(err).splitlines()[1:] if ln.strip()]
        reason = details[0][:200] if details else str(err)[:200]
        raise UserError(
            f"{path}: the weights do not fit the model its config describes ({reason})"
        ) from None
    model.to(device).eval()
    progress = payload.get("progress", {})
    return Loaded(model, tokenizer, cfg, path, device, progress.get("step"),
                  history=list(progress.get("history", [])))


def load_models(
    ckpt: Path | str | Sequence[Path | str], device: torch.device | str,
    tokenizer_dir: Path | str | None = None,
) -> Loaded:
    """One checkpoint (a path, or a list of one), or several decoding as one `Ensemble`.

    Each member is loaded by `load_for_inference` (with `tokenizer_dir`, or its own run's
    tokenizer); the first gives the ensemble's tokenizer, config (corpus, decoding settings,
    length limits) and `checkpoint`; `step` is None.

    Raises:
        UserError: no checkpoint, what `load_for_inference` refuses, or a member trained with
            another tokenizer than the first (both checkpoints and the fields that differ named).
    """
    paths = [ckpt] if isinstance(ckpt, (str, Path)) else list(ckpt)
    if not paths:
        raise UserError("ckpt=[]: name a checkpoint, or several for an ensemble")
    loaded = [load_for_inference(path, device, tokenizer_dir) for path in paths]
    first = loaded[0]
    if len(loaded) == 1:
        return first
    for other in loaded[1:]:
        ours, theirs = first.tokenizer.identity, other.tokenizer.identity
        differ = sorted(key for key in set(ours) | set(theirs) if ours.get(key) != theirs.get(key))
        if differ:
            raise UserError(f"{other.checkpoint}: another tokenizer than {first.checkpoint} "
                            f"(differs in {', '.join(differ)}); an ensemble's members share one")
    return replace(first, model=Ensemble([m.model for m in loaded]), step=None,
                   members=tuple(m.checkpoint for m in loaded))


def search_settings(
    cfg: DictConfig, beam_size: int | None, batch_size: int | None, nbest: int = 1
) -> DecodeSettings:
    """The checkpoint's decoding settings, with the command line's beam, batch and n-best.

    Raises:
        UserError: a size below 1, or nbest above the beam size.
    """
    beam = cfg.decoding.beam_size if beam_size is None else beam_size
    batch = cfg.decoding.batch_size if batch_size is None else batch_size
    for name, value in (("beam_size", beam), ("batch_size", batch), ("nbest", nbest)):
        if value < 1:
            raise UserError(f"{name}={value}: must be at least 1")
    if nbest > beam:
        raise UserError(f"nbest={nbest} needs beam_size >= {nbest} (beam_size is {beam})")
    return replace(decode_settings(cfg.decoding, beam), batch_size=batch, nbest=nbest)
