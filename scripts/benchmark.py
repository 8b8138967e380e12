"""Training speed, decoding time, memory and (on CUDA) MFU of each model variant.

    python scripts/benchmark.py --preset peer --variants bahdanau transformer --json bench.json
    python scripts/benchmark.py --preset iwslt --device cuda --steps 50
    python scripts/benchmark.py --preset docs --src-lengths 1-15 16-30 31-60 61-256

Every variant is measured in a fresh process (so peak memory is its own) with the real code:
the config is composed from configs/ like `python -m seq2seq.train` would, the training parts
are built by `build_parts` as for a run, the real `Update` runs on real batches of the preset's
corpus from `TrainBatches.epoch_batches`, and its test split is decoded with `decode_ids`,
greedy and with beam 5.

Presets (sizes and data):
- peer: the sizes of ../shared/PEERS.md on Ding en->de (experiment=peer_rnn, peer_transformer;
  Luong and vanilla at the same 256 sizes), for a one-to-one comparison with JoeyNMT.
- iwslt: the IWSLT recipes (experiment=iwslt2017_de_en_*) on Ding de->en.
- docs: the documentation recipes (experiment=docs_de_en_*) on the documentation corpus, about
  29 source pieces a pair against Ding's 14.5; with --src-lengths the training speed is also
  timed on the batches of each range of source lengths alone (same model, vocabulary and
  batch size): how the cost of a token grows with sentence length.

Figures:
- train tokens/s: real target tokens (EOS included, padding excluded) per second of
  the update (collate and host-to-device copy included), after 2 warmup steps; the median
  over repeats, each repeat timing the same `--steps` batches, spread evenly over an epoch
  (the first batches alone can be unrepresentative: their tokens/s varies by 15%).
- padding: the share of padded positions (source and target, `pad_to_multiple` rounding
  included) over the batches of one training epoch.
- decode s: seconds to decode the test split, median over repeats, and the mean hypothesis
  length. With random weights (no --checkpoint-dir) a hypothesis ends wherever EOS happens to
  win, often only at the maximum length (1.5 * source + 10): not the times of a trained model.
- peak memory: CPU, the process's maximum resident set size (ru_maxrss, data and tokenizer
  included) after training and at the end; CUDA, torch.cuda.max_memory_allocated of training
  and of decoding.
- MFU (CUDA only): see FLOPS_METHOD.
- `--precisions fp32 bf16 bf16+compile`: every variant trained in each (one subprocess each,
  `trainer.precision`, and `trainer.compile=true` for +compile), tokens/s side by side in one
  run; and this CPU's own ceiling on each model's shapes: every matrix product of the model
  (its Linear layers at a batch's tokens as rows, its RNN weights at a batch's pairs as rows),
  timed alone in fp32 and in bf16 (`gemm_ceiling`), combined as the time-weighted mean that
  those products would take together, so the share of the ceiling a training step reaches is
  FLOPs per token * tokens/s / that ceiling.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("vanilla", "bahdanau", "luong", "transformer")
WARMUP_STEPS = 2
PRECISIONS = ("fp32", "bf16", "bf16+compile")

# Config overrides per preset and variant (composed against configs/, like the CLI). Luong
# takes the sizes and training of the preset's Bahdanau recipe, restated here: the recipes also
# set Bahdanau's own keys (attn_dim, query_word), which a Luong config does not have.
PRESETS: dict[str, dict[str, list[str]]] = {
    "peer": {
        "vanilla": ["data=ding_en_de", "model=vanilla", "tokenizer.vocab_size=8000",
                    "model.emb_dim=256", "model.hidden_size=256", "model.tie_embeddings=true"],
        "bahdanau": ["experiment=peer_rnn"],
        "luong": ["data=ding_en_de", "model=luong", "tokenizer.vocab_size=8000",
                  "model.share_embeddings=false", "model.lexical=false", "trainer.ema_decay=null",
                  "trainer.batch_tokens=4096", "trainer.max_steps=null",
                  "trainer.max_time=600"],
        "transformer": ["experiment=peer_transformer"],
    },
    "iwslt": {
        "vanilla": ["experiment=iwslt2017_de_en_vanilla", "data=ding_de_en"],
        "bahdanau": ["experiment=iwslt2017_de_en_bahdanau", "data=ding_de_en"],
        "luong": ["data=ding_de_en", "model=luong", "tokenizer.vocab_size=10000",
                  "model.emb_dim=512", "model.hidden_size=512", "model.dropout=0.3",
                  "model.lexical=false", "model.share_embeddings=false",
                  "model.tie_embeddings=false", "trainer.ema_decay=null",
                  "trainer.batch_tokens=4096", "trainer.pad_to_multiple=8", "trainer.lr=1e-3",
                  "trainer.max_time=null", "trainer.max_steps=null", "trainer.max_epochs=50",
                  "trainer.eval_every=2000",
                  "trainer.save_every=2000", "trainer.log_every=100", "trainer.patience=8"],
        "transformer": ["experiment=iwslt2017_de_en_transformer", "data=ding_de_en"],
    },
    "docs": {variant: [f"experiment=docs_de_en_{variant}"] for variant in VARIANTS},
}

# Dense bf16 tensor-core peaks in TFLOPS (vendor data sheets), matched in this order against
# torch.cuda.get_device_name(); --peak-tflops overrides.
PEAK_BF16_TFLOPS: list[tuple[str, float]] = [
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("RTX 4090", 165.0),
    ("RTX 3090", 71.0),
]

FLOPS_METHOD = (
    "model FLOPs per target token = 6 * (non-embedding parameters + output projection) "
    "[forward 2, backward 4 FLOPs per parameter and token; encoder parameters counted per "
    "target token, as source and target lengths are alike] + attention FLOPs per target token "
    "(forward x 3), computed on the padded shapes the kernels see: Transformer "
    "4 * D * (L_enc * S^2 + L_dec * (T^2 + T * S)) per batch row (Q K^T and weights x V, "
    "causal self-attention counted in full); RNN attention (S * T pairs per row) "
    "2 * score width + 2 * K per pair (additive: attn_dim, dot/general: K = encoder state "
    "size); vanilla none. MFU = FLOPs per token * tokens/s / the GPU's dense bf16 peak."
)
RANDOM_WEIGHTS_NOTE = (
    "note: decoding uses random weights (no --checkpoint-dir): a hypothesis ends wherever EOS "
    "happens to win, often only at the maximum length (1.5 * source + 10), so decode times "
    "(see the mean hypothesis lengths) are not those of a trained model."
)


# ---- the worker: one variant, in its own process ------------------------------------------------
def compose_variant(preset: str, variant: str, device: str, run_dir: str,
                    overrides: list[str]) -> Any:
    """The composed config of one variant of a preset."""
    from hydra import compose, initialize_config_dir

    from seq2seq.config import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("config", overrides=[*PRESETS[preset][variant], f"trainer.device={device}",
                                            f"run_dir={run_dir}", *overrides])


def padded_share(batches: list[list[int]], src_lens: list[int], tgt_lens: list[int],
                 multiple: int) -> float:
    """Padded positions over all positions of `batches` (EOS/BOS included, as `collate` pads)."""
    positions = real = 0
    for batch in batches:
        src = [src_lens[i] + 1 for i in batch]
        tgt = [tgt_lens[i] + 1 for i in batch]
        src_len = -(-max(src) // multiple) * multiple
        tgt_len = -(-max(tgt) // multiple) * multiple
        positions += len(batch) * (src_len + tgt_len)
        real += sum(src) + sum(tgt)
    return 1.0 - real / positions if positions else 0.0


def spread_batches(epoch: list[list[int]], count: int) -> list[list[int]]:
    """`count` batches taken evenly across the epoch's (shuffled) order, so the timed batches
    have the length mix of a whole epoch rather than of its first few batches; an epoch
    shorter than `count` is repeated."""
    if count >= len(epoch):
        return (epoch * math.ceil(count / len(epoch)))[:count]
    return [epoch[i * len(epoch) // count] for i in range(count)]


def batches_in_range(epoch: list[list[int]], src_lens: list[int], low: int,
                     high: int) -> list[list[int]]:
    """The batches whose mean source length (pieces) lies in [low, high]: batches hold pairs
    of similar lengths, so these are the batches of that range's sentences."""
    return [b for b in epoch if low <= sum(src_lens[i] for i in b) / len(b) <= high]


def length_range(text: str) -> tuple[int, int]:
    """"16-30" -> (16, 30)."""
    low, sep, high = text.partition("-")
    if not (sep and low.isdigit() and high.isdigit() and 0 < int(low) <= int(high)):
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH source pieces, got {text!r}")
    return int(low), int(high)


def flop_parameters(model: Any) -> int:
    """Parameters that cost 6 FLOPs per token: all but embedding tables, plus the output
    projection (counted once even when it shares the target embedding's matrix)."""
    from torch import nn

    seen: set[int] = set()
    total = 0
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            continue
        for param in module.parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                total += param.numel()
    return total


def attention_flops(model_cfg: Any, rows: int, src_len: int, tgt_len: int) -> float:
    """Forward + backward attention FLOPs of one batch (see FLOPS_METHOD)."""
    if "d_model" in model_cfg:  # Transformer
        per_row = 4 * model_cfg.d_model * (
            model_cfg.num_encoder_layers * src_len**2
            + model_cfg.num_decoder_layers * (tgt_len**2 + tgt_len * src_len)
        )
    elif "attn_dim" in model_cfg:  # Bahdanau: additive scores over 2H-wide states
        memory = 2 * model_cfg.hidden_size
        per_row = src_len * tgt_len * (2 * model_cfg.attn_dim + 2 * memory)
    elif "score" in model_cfg:  # Luong: dot (states projected to H) or general scores
        memory = model_cfg.hidden_size * (1 if model_cfg.score == "dot" else 2)
        per_row = src_len * tgt_len * 4 * memory  # scores and weighted sum, both K wide
    else:  # vanilla: no attention
        return 0.0
    return 3.0 * rows * per_row


def matmul_shapes(model: Any, tokens: int, rows: int) -> list[tuple[int, int, int]]:
    """(M, K, N) of every weight matrix product of a training step, once per weight: a Linear
    takes a batch's `tokens` as rows, an RNN's input and hidden weights one step's `rows`
    (pairs of the batch)."""
    from torch import nn

    shapes = []
    for module in model.modules():
        if isinstance(module, nn.Linear):
            shapes.append((tokens, module.in_features, module.out_features))
        elif isinstance(module, nn.RNNBase):
            for name, param in module.named_parameters():
                if name.startswith("weight_"):
                    shapes.append((rows, param.shape[1], param.shape[0]))
    return shapes


def gemm_ceiling(shapes: list[tuple[int, int, int]], dtype: str, repeats: int = 5) -> float:
    """FLOP/s of the products `shapes` run one after another in `dtype` (fp32 | bf16) on this
    device's CPU threads: total FLOPs over the sum of each shape's median time."""
    import torch

    kind = torch.float32 if dtype == "fp32" else torch.bfloat16
    flops = seconds = 0.0
    for m, k, n in dict.fromkeys(shapes):
        a, b = torch.randn(m, k, dtype=kind), torch.randn(k, n, dtype=kind)
        torch.mm(a, b)  # warm the kernel
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        count = shapes.count((m, k, n))
        flops += count * 2.0 * m * k * n
        seconds += count * statistics.median(times)
    return flops / seconds


def peak_tflops(device_name: str, override: float | None) -> float | None:
    if override is not None:
        return override
    for key, tflops in PEAK_BF16_TFLOPS:
        if key in device_name:
            return tflops
    return None


def find_checkpoint(directory: Path, variant: str) -> Path:
    """The newest best.pt under `directory` whose path has a folder named after the variant
    (run folders are <runs_root>/<data>/<model>/<time>/checkpoints/best.pt)."""
    from seq2seq.errors import UserError

    found = [p for p in directory.rglob("best.pt") if variant in p.relative_to(directory).parts]
    if not found:
        raise UserError(f"--checkpoint-dir {directory}: no best.pt under a folder named {variant}")
    return max(found, key=lambda p: p.stat().st_mtime)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Measure one variant (args.worker) in this process."""
    import torch

    from seq2seq.corpus import prepare_data
    from seq2seq.decoding import decode_settings
    from seq2seq.errors import UserError
    from seq2seq.evaluation.decode_and_score import decode_ids
    from seq2seq.models import is_recurrent
    from seq2seq.models.base import count_parameters
    from seq2seq.runtime import peak_memory_mib, setup_runtime
    from seq2seq.training.setup import build_parts

    variant = args.worker
    with tempfile.TemporaryDirectory(prefix="benchmark-") as tmp:
        cfg = compose_variant(args.preset, variant, args.device, tmp, args.overrides)
        t = cfg.trainer
        rt = setup_runtime(t.device, t.precision, t.threads, t.seed, is_recurrent(cfg.model))
        cuda = rt.device.type == "cuda"

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize(rt.device)

        data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
        parts = build_parts(cfg, rt, data, Path(tmp))
        train_batches = parts.batches
        split = train_batches.epoch_split(0)
        epoch = train_batches.epoch_batches(0)
        batches = spread_batches(epoch, WARMUP_STEPS + args.steps)

        if cuda:
            torch.cuda.reset_peak_memory_stats(rt.device)
        parts.model.train()
        updates = 0

        def step(indices: list[int]) -> torch.Tensor:
            """One update; returns its real target tokens as a device tensor (no sync)."""
            nonlocal updates
            updates += 1
            batch = train_batches.to_device(train_batches.collate(split, indices))
            return parts.update([batch], updates)[2]

        def rates_of(batches: list[list[int]]) -> list[float]:
            """Target tokens/s of each repeat over batches[WARMUP_STEPS:]."""
            for indices in batches[:WARMUP_STEPS]:
                step(indices)
            sync()
            rates = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                tokens = sum(step(indices) for indices in batches[WARMUP_STEPS:])
                sync()
                rates.append(float(tokens) / (time.perf_counter() - start))
            return rates

        rates = rates_of(batches)
        timed = batches[WARMUP_STEPS:]
        by_length = []
        for low, high in args.src_lengths or []:
            chosen = batches_in_range(epoch, split.src_lens, low, high)
            if not chosen:
                continue
            pairs = [i for b in chosen for i in b]
            range_rates = rates_of(spread_batches(chosen, WARMUP_STEPS + args.steps))
            by_length.append({
                "src_pieces": f"{low}-{high}",
                "batches": len(chosen),
                "mean_src_pieces": sum(split.src_lens[i] for i in pairs) / len(pairs),
                "pairs_per_batch": len(pairs) / len(chosen),
                "train_tokens_per_s": statistics.median(range_rates),
            })
        train_peak = (torch.cuda.max_memory_allocated(rt.device) / 2**20 if cuda
                      else peak_memory_mib())
        parts.optimizer.zero_grad(set_to_none=True)

        # FLOPs of the timed batches, per real target token
        param_flops = 6 * flop_parameters(parts.model)
        flops = tgt_tokens = 0.0
        for indices in timed:
            batch = train_batches.collate(split, indices)
            real = batch.num_tgt_tokens
            flops += param_flops * real + attention_flops(
                cfg.model, batch.num_sentences, batch.src.size(1), batch.tgt_out.size(1)
            )
            tgt_tokens += real
        flops_per_token = flops / max(tgt_tokens, 1)
        tokens_per_s = statistics.median(rates)

        model, test = parts.model, data.splits["test"]
        sources = test.src_text[: args.decode_sentences]
        src_ids = test.src_ids[: len(sources)]
        checkpoint = None
        if args.checkpoint_dir is not None:
            from seq2seq.inference import load_for_inference  # only needed with checkpoints

            checkpoint = find_checkpoint(Path(args.checkpoint_dir), variant)
            loaded = load_for_inference(checkpoint, rt.device)
            if loaded.config.data.name != cfg.data.name:
                raise UserError(f"{checkpoint}: trained on {loaded.config.data.name}, but preset "
                                f"{args.preset} decodes {cfg.data.name}")
            model = loaded.model
            src_ids = loaded.tokenizer.encode_src(sources)
        if cuda:
            torch.cuda.reset_peak_memory_stats(rt.device)
        decode: dict[str, dict[str, float]] = {}
        for name, beam in (("greedy", 1), ("beam5", 5)):
            settings = decode_settings(cfg.decoding, beam)
            seconds, lengths = [], []
            for _ in range(args.repeats):
                start = time.perf_counter()
                hyps = decode_ids(model, src_ids, settings, rt.device)
                sync()
                seconds.append(time.perf_counter() - start)
                lengths = [len(nbest[0].tokens) for nbest in hyps]
            decode[name] = {
                "seconds": statistics.median(seconds),
                "mean_hyp_len": sum(lengths) / max(len(lengths), 1),
            }
        decode_peak = torch.cuda.max_memory_allocated(rt.device) / 2**20 if cuda else None
        parts.close()

        device_name = torch.cuda.get_device_name(rt.device) if cuda else "cpu"
        peak = peak_tflops(device_name, args.peak_tflops) if cuda else None
        ceiling = {}
        if not cuda:  # this CPU's own ceiling on the model's shapes (a mean timed batch)
            mean_tokens = round(tgt_tokens / max(len(timed), 1))
            shapes = matmul_shapes(parts.model, mean_tokens, round(len(split) / len(epoch)))
            ceiling = {dtype: gemm_ceiling(shapes, dtype) for dtype in ("fp32", "bf16")}
        return {
            "variant": variant,
            "model": cfg.model.name,
            "data": cfg.data.name,
            "test_set": cfg.data.test_set,
            "device": str(rt.device),
            "device_name": device_name,
            "precision": rt.precision,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "parameters": count_parameters(parts.model),
            "vocab_size": data.tokenizer.tgt_vocab_size,
            "batch_tokens": t.batch_tokens,
            "train_batches_per_epoch": len(epoch),
            "pairs_per_batch": len(split) / max(len(epoch), 1),
            "mean_src_pieces": sum(split.src_lens) / max(len(split), 1),
            "padding": padded_share(epoch, split.src_lens, split.tgt_lens, t.pad_to_multiple),
            "train_steps": len(timed),
            "train_tokens_per_s": tokens_per_s,
            "train_tokens_per_s_runs": rates,
            "by_src_length": by_length,
            "flops_per_tgt_token": flops_per_token,
            "peak_tflops": peak,
            "mfu": flops_per_token * tokens_per_s / (peak * 1e12) if peak else None,
            "compile": bool(t.compile),
            "cpu_gemm_ceiling_flops": ceiling,
            "cpu_ceiling_share": (flops_per_token * tokens_per_s / ceiling[
                "bf16" if rt.precision == "bf16" else "fp32"]) if ceiling else None,
            "decode_sentences": len(src_ids),
            "decode": decode,
            "checkpoint": str(checkpoint) if checkpoint else None,
            "peak_mem_train_mib": train_peak,
            "peak_mem_decode_mib": decode_peak,
            "peak_mem_process_mib": peak_memory_mib(),
        }


# ---- the driver: one subprocess per variant, a table, a JSON file -------------------------------
def run_variant(variant: str, args: argparse.Namespace, precision: str | None = None
                ) -> dict[str, Any]:
    """Measure `variant` in a subprocess; `precision` (of PRECISIONS) overrides the config's."""
    overrides = list(args.overrides)
    if precision is not None:
        overrides += [f"trainer.precision={precision.removesuffix('+compile')}",
                      f"trainer.compile={str(precision.endswith('+compile')).lower()}"]
    with tempfile.TemporaryDirectory(prefix="benchmark-") as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable, str(Path(__file__).resolve()), "--worker", variant,
            "--worker-out", str(out), "--preset", args.preset, "--steps", str(args.steps),
            "--repeats", str(args.repeats), "--device", args.device,
        ]
        if args.checkpoint_dir is not None:
            command += ["--checkpoint-dir", str(args.checkpoint_dir)]
        if args.decode_sentences is not None:
            command += ["--decode-sentences", str(args.decode_sentences)]
        if args.peak_tflops is not None:
            command += ["--peak-tflops", str(args.peak_tflops)]
        if args.src_lengths:
            command += ["--src-lengths", *(f"{low}-{high}" for low, high in args.src_lengths)]
        command += ["--", *overrides]
        print(f"== {variant}" + (f" {precision}" if precision else ""), file=sys.stderr,
              flush=True)
        # The worker's progress lines go to stderr: stdout is kept for the table.
        proc = subprocess.run(command, cwd=ROOT, stdout=sys.stderr, env=os.environ.copy())
        if proc.returncode != 0 or not out.is_file():
            return {"variant": variant, "precision_asked": precision,
                    "error": f"worker exited with status {proc.returncode}"}
        return {**json.loads(out.read_text()), "precision_asked": precision}


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| variant | parameters | source pieces / pair | pairs / batch | train tokens/s | MFU "
        "| padding | peak memory train (MiB) "
        "| decode greedy (s) | decode beam 5 (s) | mean hyp. length greedy / beam 5 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['error']} |" + " |" * 9)
            continue
        greedy, beam = r["decode"]["greedy"], r["decode"]["beam5"]
        lines.append(
            f"| {r['variant']} | {r['parameters'] / 1e6:.2f}M | {r['mean_src_pieces']:.1f} "
            f"| {r['pairs_per_batch']:.1f} | {r['train_tokens_per_s']:,.0f} "
            f"| {percent(r['mfu'])} "
            f"| {r['padding']:.1%} | {r['peak_mem_train_mib']:,.0f} "
            f"| {greedy['seconds']:.2f} | {beam['seconds']:.2f} "
            f"| {greedy['mean_hyp_len']:.1f} / {beam['mean_hyp_len']:.1f} |"
        )
    return "\n".join(lines)


def precision_table(results: list[dict[str, Any]], precisions: list[str]) -> str:
    """Train tokens/s of each variant in each precision (and against fp32), this CPU's GEMM
    ceiling on its shapes, its FLOPs per token and the share of the ceiling each reaches."""
    lines = ["| variant | " + " | ".join(f"{p} tokens/s" for p in precisions)
             + " | GEMM ceiling fp32 / bf16 (GFLOP/s) | MFLOPs / token | share of ceiling |",
             "|---|" + "---|" * (len(precisions) + 3)]
    for variant in dict.fromkeys(r["variant"] for r in results):
        runs = {r["precision_asked"]: r for r in results if r["variant"] == variant}
        base = runs.get("fp32", {}).get("train_tokens_per_s")
        cells, shares = [], []
        for p in precisions:
            r = runs.get(p, {})
            if "train_tokens_per_s" not in r:
                cells.append(r.get("error", "–"))
                continue
            rate = r["train_tokens_per_s"]
            cells.append(f"{rate:,.0f}" + (f" ({rate / base:.2f}x)" if base and p != "fp32"
                                            else ""))
            if r.get("cpu_ceiling_share") is not None:
                shares.append(f"{p} {r['cpu_ceiling_share']:.1%}")
        any_run = next((r for r in runs.values() if "train_tokens_per_s" in r), None)
        ceiling = any_run.get("cpu_gemm_ceiling_flops") if any_run else None
        lines.append(f"| {variant} | " + " | ".join(cells) + " | "
                     + (f"{ceiling['fp32'] / 1e9:,.0f} / {ceiling['bf16'] / 1e9:,.0f}"
                        if ceiling else "–") + " | "
                     + (f"{any_run['flops_per_tgt_token'] / 1e6:,.1f}" if any_run else "–")
                     + " | " + ", ".join(shares) + " |")
    return "\n".join(lines)


def length_table(results: list[dict[str, Any]]) -> str:
    """Train tokens/s by source length (--src-lengths), and each range's speed over the first
    range's: how the cost of a token grows with sentence length."""
    done = [r for r in results if r.get("by_src_length")]
    if not done:
        return ""
    ranges = [row["src_pieces"] for row in done[0]["by_src_length"]]
    lines = ["| variant | " + " | ".join(f"{r} pieces" for r in ranges) + " |",
             "|---|" + "---|" * len(ranges)]
    for r in done:
        rows = {row["src_pieces"]: row for row in r["by_src_length"]}
        first = r["by_src_length"][0]["train_tokens_per_s"]
        lines.append(f"| {r['variant']} | " + " | ".join(
            f"{rows[x]['train_tokens_per_s']:,.0f} ({rows[x]['train_tokens_per_s'] / first:.2f}x)"
            if x in rows else "–" for x in ranges) + " |")
    first = done[0]["by_src_length"]
    lines.append("| mean source pieces / pairs a batch | " + " | ".join(
        f"{row['mean_src_pieces']:.1f} / {row['pairs_per_batch']:.0f}" for row in first) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Training speed, decoding time, memory and MFU of each model variant "
        "on the offline corpora.",
        epilog="Extra Hydra overrides (e.g. trainer.threads=2 trainer.compile=true) apply to "
        "every variant; put them before --variants, or after --.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="peer",
                        help="model sizes and data: peer (../shared/PEERS.md, Ding en->de), iwslt "
                        "(the IWSLT recipes, Ding de->en) or docs (the documentation recipes and "
                        "corpus; with --src-lengths, speed by sentence length)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats; medians reported")
    parser.add_argument("--steps", type=int, default=30,
                        help="timed training steps per repeat (after 2 warmup steps)")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="decode with the newest best.pt under DIR/**/<variant>/ instead "
                        "of random weights")
    parser.add_argument("--decode-sentences", type=int, default=None,
                        help="decode only the first N test sentences (default: all)")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the GPU's dense bf16 peak for MFU (default: from a table)")
    parser.add_argument("--src-lengths", nargs="+", type=length_range, default=None,
                        metavar="LOW-HIGH", help="also time training on the batches of each "
                        "range of source lengths in pieces (e.g. 1-15 16-30 31-60 61-256)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=None,
                        help="train each variant in each of these, side by side")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every variant")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        from seq2seq.errors import UserError

        try:
            result = measure(args)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        args.worker_out.write_text(json.dumps(result, indent=2))
        return 0

    precisions = args.precisions or [None]
    results = [run_variant(variant, args, precision) for variant in args.variants
               for precision in precisions]
    done = [r for r in results if "error" not in r]
    print(f"\n## Benchmark, preset {args.preset}: {args.steps} timed steps x {args.repeats} "
          f"repeats (medians)")
    if done:
        first = done[0]
        print(f"device {first['device_name']} ({first['precision']}, {first['threads']} threads), "
              f"torch {first['torch']}; data {', '.join(sorted({r['data'] for r in done}))}, "
              f"decoding {first['decode_sentences']} sentences of "
              f"{', '.join(sorted({r['test_set'] for r in done}))}\n")
    print(table(results))
    print()
    if args.precisions:
        print("train tokens/s by precision (against fp32), the CPU's GEMM ceiling on each "
              "model's shapes, and the share of it reached:\n")
        print(precision_table(results, args.precisions))
        print()
    by_length = length_table(results)
    if by_length:
        print("train tokens/s by source length (pieces), and against the shortest range:\n")
        print(by_length)
        print()
    if args.checkpoint_dir is None:
        print(RANDOM_WEIGHTS_NOTE)
    if any(r.get("mfu") is not None for r in done):
        print(f"MFU method: {FLOPS_METHOD}")
    elif any(r["device"].startswith("cuda") for r in done):
        print("MFU: unknown GPU; pass --peak-tflops")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "preset": args.preset,
            "steps": args.steps,
            "repeats": args.repeats,
            "warmup_steps": WARMUP_STEPS,
            "random_weights": args.checkpoint_dir is None,
            "flops_method": FLOPS_METHOD,
            "results": ({r["variant"]: r for r in results} if not args.precisions else
                        results),
        }, indent=2))
        print(f"wrote {args.json}")
    return 0 if len(done) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
