"""The parts of a training run, built from the composed config: the one place training reads
it. Every part takes plain arguments; the loop (`loop.py`) never sees the config.

The order of construction is the order of random draws and is kept: the model is built from
the seed every process shares, then the weight average copies it, then each process reseeds
for its own dropout (`dropout_seed`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.tensorboard import SummaryWriter

from seq2seq.checkpoint import Checkpointer
from seq2seq.corpus import PreparedData, SegmentationSampler, prepare_data
from seq2seq.decoding import decode_settings
from seq2seq.errors import UserError
from seq2seq.evaluation.metrics import bleu_tokenize_for
from seq2seq.evaluation.word_links import aer_label
from seq2seq.models import build_model, guided_alignment
from seq2seq.models.base import count_parameters
from seq2seq.runtime import Runtime, dropout_seed, seed_everything
from seq2seq.tokenization import Tokenizer
from seq2seq.training.batches import TrainBatches
from seq2seq.training.bf16 import BF16Compute, computes_in_bf16
from seq2seq.training.ema import EMA
from seq2seq.training.guided import LEVELS, LINKS, NULLS, Guidance, reference_cells
from seq2seq.training.optim import Plateau, build_optimizer, learning_rate
from seq2seq.training.stopping import Budget
from seq2seq.training.train_log import TrainLog
from seq2seq.training.update import Update
from seq2seq.training.validation import Validator


@dataclass
class TrainingParts:
    """What the loop runs: plain objects, each with its own settings."""

    rt: Runtime
    model: nn.Module  # the trained model, unwrapped
    ema: EMA | None
    optimizer: torch.optim.Optimizer
    plateau: Plateau
    update: Update
    batches: TrainBatches
    validator: Validator
    checkpointer: Checkpointer
    budget: Budget
    log: TrainLog
    writer: SummaryWriter | None  # rank 0 only
    eval_every: int
    save_every: int
    lower_lr_on_plateau: bool  # trainer.schedule=plateau
    aer_label: str = "AER against eflomal"  # a guided run's: agreement with its teacher

    @property
    def evaluated(self) -> nn.Module:
        """The weights that are evaluated: the average (trainer.ema_decay) or the trained ones."""
        return self.ema.model if self.ema is not None else self.model

    def close(self) -> None:
        """Close the TensorBoard writer."""
        if self.writer is not None:
            self.writer.close()


def prepare_on_every_rank(
    cfg: DictConfig, rt: Runtime, tokenizer: Tokenizer | None = None
) -> PreparedData:
    """Rank 0 builds the corpus and tokenizer caches first; the others then read them.
    `tokenizer`: the one to encode with (fine-tuning), none trained."""
    if rt.distributed and not rt.is_main:
        dist.barrier()
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=rt.is_main, tokenizer=tokenizer,
                        train_links=cfg.trainer.get("alignment_weight", 0.0) > 0)
    if rt.distributed and rt.is_main:
        dist.barrier()
    return data


def build_validator(
    cfg: DictConfig, model: nn.Module, data: PreparedData, rt: Runtime,
    writer: SummaryWriter | None,
) -> Validator:
    """The validation and final test a run of `cfg` does, on `model`'s weights."""
    t = cfg.trainer
    return Validator(
        model, data, rt, writer,
        valid_settings=decode_settings(cfg.decoding, cfg.decoding.valid_beam_size),
        test_settings=decode_settings(cfg.decoding, cfg.decoding.beam_size),
        batch_tokens=t.batch_tokens, pad_to_multiple=t.pad_to_multiple,
        max_sentences=t.eval_max_sentences,
        bleu_tokenize=bleu_tokenize_for(cfg.data.tgt_lang, cfg.data.bleu_tokenize),
        test_set=f"{cfg.data.test_set}, corpus {data.fingerprint[:16]}", probe=list(cfg.data.probe),
        probe_reference=cfg.data.probe_reference,
        probe_words=[list(pair) for pair in cfg.data.probe_words], links=data.links,
    )


def build_guidance(cfg: DictConfig, data: PreparedData, verbose: bool = True) -> Guidance:
    """Guided alignment's reference for every training pair (seq2seq/training/guided.py);
    `verbose` prints what is supervised and how many target pieces are."""
    t = cfg.trainer
    if cfg.model.name == "vanilla":
        raise UserError("trainer.alignment_weight > 0 guides an attention: model=vanilla has none")
    if t.subword_alpha is not None:
        raise UserError("trainer.alignment_weight > 0 needs the fixed segmentation: set "
                        "trainer.subword_alpha=null")
    for field, allowed in (("links", LINKS), ("null", NULLS), ("level", LEVELS)):
        if t[f"alignment_{field}"] not in allowed:
            raise UserError(f"trainer.alignment_{field}={t[f'alignment_{field}']} must be one "
                            f"of {', '.join(allowed)}")
    check_reading(cfg.model, t.alignment_layer, t.alignment_head)
    if data.train_links is None:
        raise UserError("trainer.alignment_weight > 0 needs the training pairs' eflomal links "
                        "(prepare_data's train_links=True), and eflomal is unavailable: "
                        "pip install -e '.[align]'")
    split, tok = data.splits["train"], data.tokenizer
    src_spans, tgt_spans = tok.src_spans(split.src_text), tok.tgt_spans(split.tgt_text)
    cells = [reference_cells(src, tgt, s_spans, t_spans, data.train_links[(src, tgt)],
                             t.alignment_links, t.alignment_null)
             for src, tgt, s_spans, t_spans in zip(split.src_text, split.tgt_text, src_spans,
                                                   tgt_spans, strict=True)]
    transformer = cfg.model.name == "transformer"
    if verbose:
        rows = sum(len(set(c.rows.tolist())) for c in cells)
        pieces = sum(len(s) for s in tgt_spans)
        which = "the attention" if not transformer else (
            f"decoder layer {t.alignment_layer}'s cross-attention, "
            + ("mean over heads" if t.alignment_head is None else f"head {t.alignment_head}"))
        print(f"guided alignment: weight {t.alignment_weight} on {which}, toward the "
              f"{t.alignment_links} eflomal links per {t.alignment_level}; {rows:,} of "
              f"{pieces:,} training target "
              f"pieces supervised ({rows / max(pieces, 1):.0%}; unlinked: "
              f"{t.alignment_null})")
    return Guidance(t.alignment_weight, t.alignment_layer if transformer else None,
                    t.alignment_head if transformer else None, cells, t.alignment_level)


def check_reading(model: DictConfig, layer: int, head: int | None) -> None:
    """Refuse, in one line naming the valid range, a supervised attention the model does not
    have, or one the KL cannot train.

    The Transformer's layer must lie in [-L, L) for L decoder layers and its head in [0, H)
    (or null, the mean); the RNNs have one attention, so layer -1 and head null. Sparse
    attention (sparsemax, entmax15) is refused: its zeros outside the support are outside the
    KL's gradient, so a reference cell there would never be pulled up (a Fenchel-Young loss
    would be needed, which guidance does not have).
    """
    if model.name != "transformer":
        if layer != -1 or head is not None:
            raise UserError(f"trainer.alignment_layer={layer} / alignment_head={head}: "
                            f"model={model.name} has one attention, so -1 / null only")
        if model.get("attention_fn", "softmax") != "softmax":
            raise UserError(f"trainer.alignment_weight > 0 with model.attention_fn="
                            f"{model.attention_fn}: its weights outside the support get no "
                            "gradient from the KL; guidance needs attention_fn=softmax")
        return
    num_layers, num_heads = model.num_decoder_layers, model.num_heads
    if not -num_layers <= layer < num_layers:
        raise UserError(f"trainer.alignment_layer={layer} is outside [{-num_layers}, "
                        f"{num_layers}) (model.num_decoder_layers={num_layers}; -1: the last)")
    if head is not None and not 0 <= head < num_heads:
        raise UserError(f"trainer.alignment_head={head} is outside [0, {num_heads}) "
                        f"(model.num_heads={num_heads}), or null for the mean over heads")


def wrap_for_training(model: nn.Module, compile: bool, rt: Runtime) -> nn.Module:
    """What the forward pass calls: `model`, in bf16 with fp32 master weights on a CPU
    (`BF16Compute`, for the Transformer), compiled (dynamic shapes) and/or in DDP."""
    step_model = BF16Compute(model) if computes_in_bf16(model, rt.precision, rt.device) else model
    step_model = torch.compile(step_model, dynamic=True) if compile else step_model
    if rt.distributed:
        ids = [rt.device.index] if rt.device.type == "cuda" else None
        step_model = DistributedDataParallel(step_model, device_ids=ids)
    return step_model


def build_parts(cfg: DictConfig, rt: Runtime, data: PreparedData, run_dir: Path) -> TrainingParts:
    """Build the model and everything that trains it from `cfg` (see the module docstring)."""
    t, tok = cfg.trainer, data.tokenizer
    if t.alignment_weight > 0:  # in one line, before the model is built to be read there
        check_reading(cfg.model, t.alignment_layer, t.alignment_head)
    model = build_model(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size,
                        alignment=guided_alignment(cfg)).to(rt.device)
    if rt.is_main:
        print(f"model: {cfg.model.name}, {count_parameters(model) / 1e6:.2f}M parameters")
    ema = EMA(model, t.ema_decay) if t.ema_decay is not None else None
    seed_everything(dropout_seed(t.seed, rt.rank))  # the model is built: ranks draw apart
    optimizer = build_optimizer(model, t.lr, tuple(t.betas), t.weight_decay)
    plateau = Plateau(t.plateau_factor, t.plateau_patience, t.min_lr / t.lr)
    scaler = rt.grad_scaler()

    schedule, base_lr, warmup_steps, cooldown = str(t.schedule), t.lr, t.warmup_steps, t.cooldown
    if schedule in ("linear", "wsd") and not (t.max_steps or t.max_time):
        raise UserError(f"trainer.schedule={schedule} decays the rate to zero where the budget "
                        "ends: set trainer.max_steps or trainer.max_time")
    if schedule == "wsd" and not 0.0 <= cooldown <= 1.0:
        raise UserError(f"trainer.cooldown={cooldown}: a share of the budget, from 0 to 1")

    def rate(number: int, spent: float) -> float:
        return learning_rate(number, schedule, base_lr, warmup_steps, plateau.scale, spent,
                             cooldown)

    train_split = data.splits["train"]
    guidance = build_guidance(cfg, data, rt.is_main) if t.alignment_weight > 0 else None
    update = Update(model, wrap_for_training(model, t.compile, rt), optimizer, rt, rate,
                    label_smoothing=t.label_smoothing, clip_norm=t.clip_norm, scaler=scaler,
                    ema=ema, guidance=guidance)
    sampler = None
    if t.subword_alpha is not None:
        sampler = functools.partial(SegmentationSampler, tok, train_split, t.subword_alpha,
                                    t.subword_nbest, cfg.tokenizer.max_src_len,
                                    cfg.tokenizer.max_tgt_len)
    batches = TrainBatches(
        train_split, rt.device, batch_tokens=t.batch_tokens, accum_steps=t.accum_steps,
        pad_to_multiple=t.pad_to_multiple, num_workers=t.num_workers, seed=t.seed,
        rank=rt.rank, world_size=rt.world_size, sampler=sampler,
        reference=None if guidance is None else guidance.reference,
        groups=None if guidance is None else guidance.groups,
    )
    writer = SummaryWriter(str(run_dir / "tensorboard")) if rt.is_main else None
    evaluated = ema.model if ema is not None else model
    validator = build_validator(cfg, evaluated, data, rt, writer)
    config: dict[str, Any] = OmegaConf.to_container(  # type: ignore[assignment]
        cfg, resolve=True, enum_to_str=True
    )
    checkpointer = Checkpointer(run_dir / "checkpoints", rt, model, ema.model if ema else None,
                                optimizer, plateau, scaler, config, tok, t.seed, t.keep_last)
    return TrainingParts(
        rt=rt, model=model, ema=ema, optimizer=optimizer, plateau=plateau, update=update,
        batches=batches, validator=validator, checkpointer=checkpointer,
        budget=Budget(t.max_steps, t.max_epochs, t.max_time, t.patience),
        log=TrainLog(rt, writer, every=t.log_every, max_bad_steps=t.max_bad_steps,
                     max_steps=t.max_steps, max_time=t.max_time, console=t.progress),
        writer=writer, eval_every=t.eval_every, save_every=t.save_every,
        lower_lr_on_plateau=t.schedule == "plateau", aer_label=aer_label(cfg),
    )
