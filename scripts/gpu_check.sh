#!/usr/bin/env bash
# One command that checks the project on one CUDA GPU and collects every figure in one JSON file
# (about 5-8 minutes on an H100/H200-class GPU):
#   1. the GPU tests (pytest -m gpu),
#   2. scripts/benchmark.py --preset iwslt on cuda, every variant (tokens/s, MFU, decode time,
#      memory),
#   3. a short training of every variant on the Ding corpus (default sizes, TRAIN_SECONDS each)
#      with its validation and test BLEU from metrics.json.
#
# Usage: scripts/gpu_check.sh [OUT_DIR | FILE.json]
#   OUT_DIR defaults to $OUT, else results/gpu_check; the figures go to OUT_DIR/gpu_check.json
#   and every log and run folder next to it.
# Settings (environment): TRAIN_SECONDS (45), EVAL_EVERY (250), BENCH_STEPS (20),
#   BENCH_REPEATS (2), VARIANTS ("vanilla bahdanau luong transformer").
# Needs the Ding corpus (data/raw or /usr/share/trans/de-en, see data/README.md); the .venv is
# built with `make .venv/.installed` when missing. Exits non-zero when any stage failed.
set -euo pipefail

cd "$(dirname "$0")/.."
target="${1:-${OUT:-results/gpu_check}}"
if [[ "$target" == *.json ]]; then
    json="$target"
    dir="$(dirname "$target")"
else
    dir="$target"
    json="$dir/gpu_check.json"
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
json="$dir/$(basename "$json")"

TRAIN_SECONDS="${TRAIN_SECONDS:-45}"
EVAL_EVERY="${EVAL_EVERY:-250}"
BENCH_STEPS="${BENCH_STEPS:-20}"
BENCH_REPEATS="${BENCH_REPEATS:-2}"
read -r -a variants <<< "${VARIANTS:-vanilla bahdanau luong transformer}"
PY=.venv/bin/python
failed=()

stage() { printf '\n===== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

stage "0/4 environment: .venv and CUDA"
if [[ ! -x "$PY" || ! -f .venv/.installed ]]; then
    make .venv/.installed
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    "$PY" -c 'import torch; print(f"torch {torch.__version__}, CUDA build: {torch.version.cuda}")'
    echo "error: torch sees no CUDA device. On a GPU machine, a .venv copied from a CPU machine" \
         "holds the CPU build of torch: remove .venv and run this script again." >&2
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(), torch.version.cuda)'

stage "1/4 GPU tests: pytest -m gpu"
if "$PY" -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$dir/pytest_gpu.log"; then
    pytest_status=0
else
    pytest_status=$?
    failed+=("pytest -m gpu")
fi

stage "2/4 benchmark: --preset iwslt --device cuda, ${BENCH_STEPS} steps x ${BENCH_REPEATS}"
if "$PY" scripts/benchmark.py --preset iwslt --device cuda --variants "${variants[@]}" \
        --steps "$BENCH_STEPS" --repeats "$BENCH_REPEATS" --json "$dir/benchmark_iwslt.json" \
        2> "$dir/benchmark_iwslt.log"; then
    :
else
    failed+=("benchmark")
    tail -n 20 "$dir/benchmark_iwslt.log"
fi

stage "3/4 short trainings on Ding de->en: ${TRAIN_SECONDS}s each"
for model in "${variants[@]}"; do
    stage "    train $model"
    rm -rf "$dir/runs/$model"
    if "$PY" -m seq2seq.train "model=$model" "trainer.device=cuda" \
            "trainer.max_time=$TRAIN_SECONDS" "trainer.eval_every=$EVAL_EVERY" \
            "trainer.save_every=100000" "trainer.progress=false" \
            "hydra.run.dir=$dir/runs/$model" > "$dir/train_$model.log" 2>&1; then
        grep -E '^(step|test|  BLEU)' "$dir/train_$model.log" | tail -n 4 || true
    else
        failed+=("train $model")
        tail -n 20 "$dir/train_$model.log"
    fi
done

stage "4/4 collecting the figures into $json"
"$PY" - "$dir" "$json" "$pytest_status" "${variants[@]}" <<'PYTHON'
import json
import re
import sys
from pathlib import Path

import torch

out_dir, json_path, pytest_status, *variants = sys.argv[1:]
out_dir = Path(out_dir)
log = (out_dir / "pytest_gpu.log").read_text(errors="replace").strip().splitlines()
counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", log[-1])} \
    if log else {}
bench_file = out_dir / "benchmark_iwslt.json"
bench = json.loads(bench_file.read_text()) if bench_file.is_file() else None
training = {}
for model in variants:
    metrics_file = out_dir / "runs" / model / "metrics.json"
    if not metrics_file.is_file():
        training[model] = {"error": f"no metrics.json, see train_{model}.log"}
        continue
    m = json.loads(metrics_file.read_text())
    test = m.get("test", {})
    training[model] = {
        "parameters": m["parameters"],
        "steps": m["steps"],
        "epochs": round(m["epochs"], 2),
        "train_time": m["train_time"],
        "steps_per_s": round(m["steps"] / max(m["train_time"], 1e-9), 2),
        "best_valid_bleu": m["best_valid_bleu"],
        "test_set": test.get("test_set"),
        "test_bleu": test.get("bleu"),
        "test_chrf": test.get("chrf"),
        "test_beam_size": test.get("beam_size"),
        "test_decode_seconds": test.get("decode_seconds"),
        "bleu_signature": test.get("bleu_signature"),
    }
summary = {
    "gpu": torch.cuda.get_device_name(),
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "pytest_gpu": {"exit_status": int(pytest_status), **counts},
    "benchmark_iwslt": bench,
    "training_ding_de_en": training,
}
Path(json_path).write_text(json.dumps(summary, indent=2))
print(f"{'variant':<12} {'tokens/s':>10} {'MFU':>7} {'steps':>6} {'valid BLEU':>10} "
      f"{'test BLEU':>9}")
for model in variants:
    b = (bench or {}).get("results", {}).get(model, {})
    t = training.get(model, {})
    mfu = b.get("mfu")
    print(f"{model:<12} {b.get('train_tokens_per_s', float('nan')):>10,.0f} "
          f"{'n/a' if mfu is None else f'{100 * mfu:.1f}%':>7} {t.get('steps', '-'):>6} "
          f"{t.get('best_valid_bleu', float('nan')):>10.2f} "
          f"{t.get('test_bleu') if t.get('test_bleu') is not None else float('nan'):>9.2f}")
print(f"wrote {json_path}")
PYTHON

if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "gpu check passed"
