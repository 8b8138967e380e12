"""Fine-tuning: a new run that starts from the weights of a checkpoint (trainer.init_from=PATH).

What the checkpoint gives:
- its evaluated weights ("model": the weight average when its run kept one, trainer.ema_decay,
  else the trained weights; the weights its run validated, and best.pt's best), which the
  trained model and the new run's average both start from;
- its tokenizer (the `tokenizer/` folder of its run, checked against the identity the checkpoint
  records), which encodes every split of the new corpus and is saved into the new run folder
  as a normal run's is: never trained anew. The new run's tokenizer settings are the
  checkpoint's (tokenizer.max_src_len and max_tgt_len stay the new run's). The shares of
  unknown and of byte-fallback pieces on the new training split say how well it covers it.

What it does not give: the optimizer state, the learning-rate schedule, the step count, the
best validation BLEU and the early-stopping count, the random state. The run starts at step 0
with a fresh optimizer and warmup, and its first validation writes its own best.pt, as
fairseq's --restore-file with --reset-optimizer --reset-lr-scheduler --reset-meters (fairseq
#3641, #2018: no carried update count or rate; JoeyNMT #128: no old best score never beaten).
A fine-tuning run is resumed as any run is, with trainer.resume alone (with init_from it is
refused), and encodes with the tokenizer its run folder kept (`resumed_finetuning`).

The model: the new run's model config must equal the checkpoint's in every field but the
dropout rates (`dropout`, `attn_dropout`), `init` (the weights are replaced) and `max_len` (the
positions precomputed): none shapes a weight or changes what the weights compute. Any other
difference is refused, naming the field and, where it changes a weight's shape, the weight and
its two shapes. The languages must be the checkpoint's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.checkpoint import check_tokenizer, load_checkpoint
from seq2seq.corpus import EncodedSplit
from seq2seq.errors import UserError
from seq2seq.inference import run_tokenizer_dir
from seq2seq.tokenization import Tokenizer
from seq2seq.training.setup import TrainingParts

FREE_MODEL_FIELDS = ("dropout", "attn_dropout", "init", "max_len")  # may differ from the saved
TOKENIZER_FIELDS = ("type", "vocab_size", "joint", "character_coverage", "input_sentence_size")
BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


@dataclass(frozen=True)
class Start:
    """A checkpoint whose tokenizer a run encodes with: the one a fine-tuning run starts
    from, or the last.pt of a fine-tuning run it resumes."""

    path: Path
    weights: dict[str, torch.Tensor]  # its evaluated weights ("model")
    config: dict[str, Any]  # its run's resolved config
    tokenizer: Tokenizer  # its run's tokenizer


def read_start(cfg: DictConfig) -> Start | None:
    """The checkpoint trainer.init_from names, with its tokenizer; None when it names none.

    Raises:
        UserError: init_from with trainer.resume, a missing or unreadable checkpoint, one of
            other languages than data's, a missing tokenizer folder or another tokenizer.
    """
    init_from = cfg.trainer.init_from
    if init_from is None:
        return None
    if cfg.trainer.resume not in (False, None):
        raise UserError(f"trainer.init_from={init_from} with trainer.resume={cfg.trainer.resume}:"
                        " resume continues a run, init_from starts a new one; choose one")
    path = Path(str(init_from))
    if not path.is_file():
        raise UserError(f"trainer.init_from={path}: checkpoint file not found")
    payload = load_checkpoint(path)
    config, identity = payload.get("config"), payload.get("tokenizer")
    if not isinstance(config, dict) or not isinstance(identity, dict):
        raise UserError(f"trainer.init_from={path}: not a training checkpoint "
                        "(no config or tokenizer identity)")
    theirs = (identity.get("src_lang"), identity.get("tgt_lang"))
    ours = (cfg.data.src_lang, cfg.data.tgt_lang)
    if theirs != ours:
        raise UserError(f"trainer.init_from={path}: a checkpoint of {theirs[0]}→{theirs[1]}, "
                        f"data={cfg.data.name} is {ours[0]}→{ours[1]}; fine-tuning keeps the "
                        "checkpoint's languages and tokenizer")
    tok_dir = run_tokenizer_dir(path)
    if not tok_dir.is_dir():
        raise UserError(f"trainer.init_from={path}: its run's tokenizer folder {tok_dir} is "
                        "missing; the new run encodes its corpus with that tokenizer")
    tokenizer = Tokenizer.load(tok_dir)
    check_tokenizer(payload, tokenizer, path, tok_dir)
    return Start(path, payload["model"], config, tokenizer)


def resumed_finetuning(resume: Path | None) -> Start | None:
    """The checkpoint `resume` when a fine-tuning run wrote it, else None: resuming such a run
    encodes with the tokenizer its run folder kept (the one it started with), not one trained
    on its corpus, which the checkpoint would refuse.

    Raises:
        UserError: an unreadable checkpoint, or its run's tokenizer folder missing or another.
    """
    if resume is None or not Path(resume).is_file():
        return None  # Checkpointer.restore says what is wrong
    payload = load_checkpoint(resume)
    if not ((payload.get("config") or {}).get("trainer") or {}).get("init_from"):
        return None
    tok_dir = run_tokenizer_dir(resume)
    if not tok_dir.is_dir():
        raise UserError(f"{resume}: a fine-tuning run's checkpoint whose run's tokenizer folder "
                        f"{tok_dir} is missing; resuming encodes the corpus with it")
    tokenizer = Tokenizer.load(tok_dir)
    check_tokenizer(payload, tokenizer, Path(resume), tok_dir)
    return Start(Path(resume), payload["model"], payload["config"], tokenizer)


def with_start_tokenizer(cfg: DictConfig, start: Start, verbose: bool = True) -> DictConfig:
    """`cfg` with the tokenizer settings that trained the checkpoint's tokenizer, so that the
    run's config.yaml and checkpoints describe the tokenizer it uses; `verbose` prints those
    it changed."""
    saved = start.config.get("tokenizer") or {}
    changed = {key: saved[key] for key in TOKENIZER_FIELDS
               if key in saved and saved[key] != cfg.tokenizer[key]}
    if not changed:
        return cfg
    if verbose:
        print("tokenizer from the checkpoint: " + ", ".join(
            f"tokenizer.{key}={cfg.tokenizer[key]} -> {value}" for key, value in changed.items()))
    merged = OmegaConf.merge(cfg, {"tokenizer": changed})
    assert isinstance(merged, DictConfig)
    return merged


def coverage_line(tokenizer: Tokenizer, split: EncodedSplit, path: Path) -> str:
    """The shares of unknown pieces (id 1) and of byte-fallback pieces (characters the
    tokenizer never saw, spelt byte by byte) in `split`, per side."""
    shares = []
    for ids, pieces, size in ((split.src_ids, tokenizer.src_pieces, tokenizer.src_vocab_size),
                              (split.tgt_ids, tokenizer.tgt_pieces, tokenizer.tgt_vocab_size)):
        byte_ids = {i for i, piece in enumerate(pieces(range(size)))
                    if BYTE_PIECE.fullmatch(piece)}
        total = max(sum(len(row) for row in ids), 1)
        unknown = sum(row.count(tokenizer.unk_id) for row in ids)
        fallback = sum(1 for row in ids for i in row if i in byte_ids)
        shares.append((unknown / total, fallback / total))
    (src_unk, src_bytes), (tgt_unk, tgt_bytes) = shares
    return (f"tokenizer of {path} on the training split: unknown pieces {src_unk:.2%} source, "
            f"{tgt_unk:.2%} target; byte-fallback pieces {src_bytes:.2%} source, "
            f"{tgt_bytes:.2%} target")


def load_start_weights(parts: TrainingParts, start: Start) -> None:
    """Copy the checkpoint's weights into the trained model and its average (in place: the
    optimizer, the compiled and the DDP wrappers keep pointing at them).

    Raises:
        UserError: the model config differs from the checkpoint's beyond FREE_MODEL_FIELDS, or
            a weight is missing, extra or of another shape; one line naming the field and the
            weight with its two shapes.
    """
    saved, model_config = start.config.get("model") or {}, parts.checkpointer.config["model"]
    # fields only one side has are left to the weights: a config saved before a field existed
    fields = sorted(key for key in set(saved) & set(model_config)
                    if key not in FREE_MODEL_FIELDS and saved[key] != model_config[key])
    ours = parts.model.state_dict()
    weights = [f"{name} is {list(ours[name].shape)} here, {list(tensor.shape)} in the checkpoint"
               for name, tensor in start.weights.items()
               if name in ours and ours[name].shape != tensor.shape]
    theirs = set(start.weights)
    weights += [f"{name} is not in the checkpoint" for name in sorted(set(ours) - theirs)]
    weights += [f"{name} is only in the checkpoint" for name in sorted(theirs - set(ours))]
    if fields or weights:
        said = [f"model.{key}={model_config[key]} here, {saved[key]} in the checkpoint"
                for key in fields]
        raise UserError(f"trainer.init_from={start.path}: the model differs from the "
                        f"checkpoint's ({'; '.join(said + weights[:1])}); fine-tuning keeps its "
                        f"model: only model.{', model.'.join(FREE_MODEL_FIELDS)} may change")
    for model in (parts.model, parts.ema.model if parts.ema is not None else None):
        if model is not None:
            model.load_state_dict(start.weights)
    if parts.rt.is_main:
        print(f"fine-tuning from the weights of {start.path} at step 0, with a fresh optimizer, "
              "schedule and best score")
