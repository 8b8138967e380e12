"""One checkpoint format and one loader, shared by resume, evaluate and translate.

A checkpoint holds only tensors and plain containers, so it loads with
`torch.load(weights_only=True)`: a file crafted to run code when unpickled is refused.
Writes are atomic: a temporary file in the same folder, flushed, then renamed over the target.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch

from seq2seq.errors import UserError

FORMAT_VERSION = 1


def save_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write `payload` to `path` atomically: a crash leaves the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format_version": FORMAT_VERSION, **payload}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: Path | str, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; any problem becomes a one-line UserError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: checkpoint file not found")
    if not zipfile.is_zipfile(path):
        raise UserError(f"{path}: not a readable checkpoint (not a torch archive; truncated?)")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [ln.strip() for ln in str(err).splitlines()] or [type(err).__name__]
        culprit = next((ln for ln in lines if "Unsupported global" in ln), lines[0])
        raise UserError(
            f"{path}: refused to load: the file holds objects other than tensors and plain "
            f"data, which could run code ({culprit[:160]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        raise UserError(
            f"{path}: not a readable checkpoint ({type(err).__name__}: {reason})"
        ) from None
    if not isinstance(payload, dict) or "model" not in payload:
        raise UserError(f"{path}: not a seq2seq checkpoint (no model weights inside)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{path}: checkpoint format {payload.get('format_version')} is not the supported "
            f"format {FORMAT_VERSION}"
        )
    return payload


def rng_state() -> dict[str, Any]:
    """Every random generator this process uses, as plain data (CPU tensors)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`. The generators take CPU byte tensors only, so tensors that were
    loaded onto another device (a checkpoint read with map_location=cuda) come back first."""
    torch.set_rng_state(_cpu_bytes(state["torch"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_cpu_bytes(s) for s in state["cuda"]])


def _cpu_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(device="cpu", dtype=torch.uint8)
