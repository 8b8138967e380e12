"""`python -m seq2seq.average run=RUN [last=5]`: average a run's last periodic checkpoints.

Training keeps the newest `trainer.keep_last` periodic checkpoints `<run>/checkpoints/step-<N>.pt`
beside last.pt (the same payload as last.pt at step N). Their element-wise mean is written as
one checkpoint, `<run>/checkpoints/average-last<k>.pt` by default, which `seq2seq.evaluate` and
`seq2seq.translate` read like best.pt (the run's tokenizer folder is next to it).

What is averaged: by default each checkpoint's evaluated weights ("model"), which are the
exponential moving average when the run kept one (trainer.ema_decay) and the trained weights
otherwise. An EMA snapshot already averages the last ~1 / (1 - decay) updates, so the mean of
snapshots taken `save_every` updates apart widens that window over the last k saves, and it
averages the weights the run was validated and tested with. `weights=trained` averages the
trained weights ("train_model") instead, as fairseq's average_checkpoints.py does for a run
without EMA; for a run without EMA the two are the same weights.

Every checkpoint is read with the project's one loader (`load_checkpoint`,
`torch.load(weights_only=True)`) and must have the model config and the tokenizer of the newest;
anything else is refused in one line. The averaged checkpoint holds no optimizer or random
state: it is for decoding and is refused as a resume point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.checkpoint import load_checkpoint, periodic_checkpoints, save_checkpoint
from seq2seq.config import register_configs
from seq2seq.errors import UserError, exit_on_user_error

register_configs()


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return sorted(key for key in set(a) | set(b) if a.get(key) != b.get(key))


def _weights(payload: dict[str, Any], weights: str) -> dict[str, torch.Tensor]:
    """The state dict `weights` names: "evaluated" ("model") or "trained" ("train_model",
    which is "model" itself in a run without a weight average)."""
    if weights == "trained" and payload.get("train_model") is not None:
        return payload["train_model"]
    return payload["model"]


def average_checkpoints(paths: list[Path], weights: str = "evaluated") -> dict[str, Any]:
    """The checkpoint whose weights are the element-wise mean of those of `paths`.

    Args:
        paths: checkpoints of one run, oldest first; the newest gives the config, tokenizer
            identity and progress of the result.
        weights: "evaluated" (each checkpoint's "model": the EMA when the run kept one) or
            "trained" (the trained weights, "train_model"); see the module docstring.

    Returns:
        A checkpoint payload for `save_checkpoint`: "model" (the mean, in each tensor's dtype;
        integer buffers are the newest's), "config", "tokenizer", "progress",
        "num_parameters" and "averaged" (the files, their steps and which weights).

    Raises:
        UserError: no paths, an unreadable checkpoint, or one whose model config, tokenizer or
            weight names and shapes differ from the newest's, named with what differs.
    """
    if weights not in ("evaluated", "trained"):
        raise UserError(f"weights={weights!r}: use evaluated or trained")
    if not paths:
        raise UserError("no checkpoints to average")
    newest_path = Path(paths[-1])
    newest = load_checkpoint(newest_path)
    reference = _weights(newest, weights)
    sums = {name: tensor.double() for name, tensor in reference.items()
            if tensor.is_floating_point()}
    steps = []
    for path in map(Path, paths[:-1]):
        payload = load_checkpoint(path)
        model_differs = _differing(payload.get("config", {}).get("model", {}),
                                   newest.get("config", {}).get("model", {}))
        if model_differs:
            raise UserError(f"{path}: another model config than {newest_path} "
                            f"(differs in model.{', model.'.join(model_differs)})")
        tokenizer_differs = _differing(payload.get("tokenizer") or {},
                                       newest.get("tokenizer") or {})
        if tokenizer_differs:
            raise UserError(f"{path}: another tokenizer than {newest_path} "
                            f"(differs in {', '.join(tokenizer_differs)})")
        state = _weights(payload, weights)
        shapes_differ = sorted(name for name in set(state) | set(reference)
                               if name not in state or name not in reference
                               or state[name].shape != reference[name].shape)
        if shapes_differ:
            raise UserError(f"{path}: weights other than those of {newest_path} "
                            f"(differ in {', '.join(shapes_differ[:5])})")
        for name in sums:
            sums[name] += state[name].double()
        steps.append(payload.get("progress", {}).get("step"))
    steps.append(newest.get("progress", {}).get("step"))
    averaged = {name: (sums[name] / len(paths)).to(tensor.dtype) if name in sums else tensor
                for name, tensor in reference.items()}
    return {
        "model": averaged,
        "train_model": None,
        "config": newest["config"],
        "tokenizer": newest["tokenizer"],
        "progress": newest.get("progress", {}),
        "num_parameters": newest.get("num_parameters"),
        "averaged": {"checkpoints": [Path(p).name for p in paths], "steps": steps,
                     "weights": weights},
    }


def average_run(
    run: str | Path, last: int = 5, weights: str = "evaluated", output: str | Path | None = None
) -> Path:
    """Average the newest `last` periodic checkpoints of a run folder; returns the file written.

    Args:
        run: the run folder (`<run>/checkpoints/step-<N>.pt`).
        last: how many of the newest periodic checkpoints to average.
        weights: "evaluated" or "trained" (see `average_checkpoints`).
        output: the averaged checkpoint; None: `<run>/checkpoints/average-last<last>.pt`. Put it
            in a folder whose parent holds the run's `tokenizer/`, or pass evaluate and
            translate a `tokenizer_dir`.

    Raises:
        UserError: `last` below 1, fewer than `last` periodic checkpoints, or a checkpoint that
            `average_checkpoints` refuses.
    """
    folder = Path(run) / "checkpoints"
    if last < 1:
        raise UserError(f"last={last}: must be at least 1")
    found = periodic_checkpoints(folder)
    if len(found) < last:
        raise UserError(f"{folder}: {len(found)} periodic checkpoints (step-<N>.pt), fewer than "
                        f"last={last}; train with trainer.keep_last={last} or more")
    chosen = found[-last:]
    payload = average_checkpoints(chosen, weights)
    target = Path(output) if output is not None else folder / f"average-last{last}.pt"
    save_checkpoint(target, payload)
    print(f"averaged the {weights} weights of {', '.join(p.name for p in chosen)} "
          f"into {target}")
    return target


@hydra.main(config_path="../configs", config_name="average", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "run"):
        raise UserError("run=PATH is required: the run folder whose checkpoints to average")
    average_run(**OmegaConf.to_container(cfg, enum_to_str=True))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
