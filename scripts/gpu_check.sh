#!/usr/bin/env bash
# The device check: one command for a lent GPU machine with no network and its own torch
# (docs/gpu.md gives the exact device call). Within about 9 minutes on an H200:
#   0. the environment: install .venv beside the machine's torch from the carried wheelhouse
#      (make install-offline), record GPU, driver, torch, CUDA and the versions datasets needs;
#   1. the tests: collection of the whole suite, `pytest -m gpu` and every CUDA-parametrized
#      test (all marked gpu; on the CPU, their CPU twins);
#   2. scripts/benchmark.py --preset iwslt on the device: tokens/s and MFU per variant;
#   3. the documentation corpus at GPU compute: the four variants side by side on one GPU with
#      the GPU recipes (experiment=docs_de_en_gpu_*: bf16, large batches, early stopping on
#      validation), loaded from the carried corpus export; test BLEU beam 5, AER, Shift-Att and
#      the length study (seq2seq.compare's report);
#   3b. (STAGES=compare_ko, a second device call: one call's deadline holds the documentation
#      comparison only) the seeds' pair at GPU compute: Bahdanau and the Transformer side by side
#      on English→Korean (experiment=debian_en_ko_gpu_*) from its carried export;
#   4. the figures in one JSON, the reports, their curves and one archive of every log.
#
# Usage: scripts/gpu_check.sh [OUT_DIR]   (OUT_DIR: $OUT, else results/gpu_check)
# Settings (environment), with the device call's values as defaults:
#   DEVICE=cuda  PYTHON=python3 (the interpreter whose torch is used)
#   WHEELS=wheelhouse/cp312-h200  DOCS=data/export/docs_de_en  DING=data/export/ding_de_en
#   KO=data/export/debian_en_ko
#   (corpus exports: python -m seq2seq.prepare data=NAME export=DIR)
#   COMPARE_SECONDS=210 (training per variant, all at once)  JOBS=4  BENCH_STEPS=20
#   BENCH_REPEATS=2  BENCH_ARGS="" (e.g. the rehearsal's --decode-sentences 8)
#   VARIANTS="vanilla bahdanau luong transformer"
#   EXTRA="" (overrides for every training, e.g. the CPU rehearsal's trainer.threads=1)
#   BENCH_LIMIT=150 COMPARE_LIMIT=the training+240 (docs), +200 (en→ko); set, it bounds both
#   (the stages' limits in seconds)
#   DEADLINE=520 (seconds from the start by which the figures stage begins: the device call's
#   timeout_s=560 less the figures' time; every stage's limit is cut to what is left, and a
#   stage with under 10 s left is not run but named as failed, so a rerun names it)
#   DECODE_RESERVE=150 (of what is left to the comparison, the seconds kept for its setup and
#   test decoding: its training gets the rest, at most COMPARE_SECONDS, and it is not run with
#   under 30 s of training left)
#   KO_SECONDS=150 (the en→ko comparison's training per variant, at most)  KO_DECODE_RESERVE=120
#   KO_VARIANTS="bahdanau transformer"
#   STAGES="tests benchmark compare" (a rerun after a call that stopped early names the rest;
#   STAGES=compare_ko, the en→ko comparison, is a call of its own)
# Each stage has its own time limit, so one that hangs cannot take the others' time; the exit
# status is 1 when any stage failed, and the figures of the others are still collected.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${OUT:-results/gpu_check}}"
mkdir -p "$dir/logs" && dir="$(cd "$dir" && pwd)"
DEVICE="${DEVICE:-cuda}"
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-wheelhouse/cp312-h200}"
DOCS="${DOCS:-data/export/docs_de_en}"
DING="${DING:-data/export/ding_de_en}"
KO="${KO:-data/export/debian_en_ko}"
KO_SECONDS="${KO_SECONDS:-150}"
KO_DECODE_RESERVE="${KO_DECODE_RESERVE:-120}"
read -r -a ko_variants <<< "${KO_VARIANTS:-bahdanau transformer}"
COMPARE_SECONDS="${COMPARE_SECONDS:-210}"
DEADLINE="${DEADLINE:-520}"
DECODE_RESERVE="${DECODE_RESERVE:-150}"
JOBS="${JOBS:-4}"
BENCH_STEPS="${BENCH_STEPS:-20}"
BENCH_REPEATS="${BENCH_REPEATS:-2}"
read -r -a variants <<< "${VARIANTS:-vanilla bahdanau luong transformer}"
read -r -a extra <<< "${EXTRA:-}"
read -r -a bench_args <<< "${BENCH_ARGS:-}"
STAGES=" ${STAGES:-tests benchmark compare} "
PY=.venv/bin/python
logs="$dir/logs"
failed=()
stage() { printf '\n===== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
not_run() {  # not_run NAME WHY: a stage the deadline left no time for
    failed+=("$1")
    echo "$1: not run, $2" | tee "$logs/$1.log"
}
run_stage() {  # run_stage NAME SECONDS COMMAND...: the command's output to logs/NAME.log,
    local name=$1 seconds=$2 left=$((DEADLINE - SECONDS))  # within the deadline
    shift 2
    if ((left < 10)); then
        not_run "$name" "${DEADLINE}s deadline reached at ${SECONDS}s"
        return
    fi
    ((seconds > left)) && seconds=$left
    if ! timeout --signal=TERM --kill-after=20 "$seconds" "$@" > "$logs/$name.log" 2>&1; then
        failed+=("$name")
        tail -n 15 "$logs/$name.log"
    fi
}

compare_stage() {  # compare_stage NAME TITLE RECIPE MAX_SECONDS RESERVE PAD JOBS EXPORT RUNS
    # VARIANTS...: seq2seq.compare at GPU compute from a corpus export, training what the
    # deadline leaves after RESERVE seconds (at most MAX_SECONDS), within COMPARE_LIMIT, else
    # that training plus PAD seconds
    local name=$1 title=$2 recipe=$3 max=$4 reserve=$5 pad=$6 jobs=$7 export=$8 runs=$9
    shift 9
    local train=$((DEADLINE - SECONDS - reserve))  # what the deadline leaves to training
    ((train > max)) && train=$max
    stage "$title at GPU compute: ${train}s each, $jobs at once"
    if ((train < 30)); then
        not_run "$name" "${train}s of training left before the ${DEADLINE}s deadline"
        return
    fi
    run_stage "$name" "${COMPARE_LIMIT:-$((train + pad))}" "$PY" -m seq2seq.compare \
        "compare.recipe=$recipe" "compare.max_time=$train" "compare.jobs=$jobs" \
        "compare.variants=[$(IFS=,; echo "$*")]" "compare.out_dir=$dir/$name" \
        "runs_root=$dir/$runs" "data.export_dir=$(realpath "$export")" "trainer.device=$DEVICE" \
        "${extra[@]}"
}

stage "0/4 environment"
if [[ ! -x "$PY" ]]; then
    run_stage install 240 scripts/install_offline.sh "$PYTHON" "$WHEELS"
fi
[[ -x "$PY" ]] || { echo "no .venv: see $logs/install.log" >&2; exit 2; }
nvidia-smi > "$logs/nvidia-smi.txt" 2>&1 || true
"$PY" - "$dir/environment.json" "$DEVICE" <<'PYTHON' | tee "$logs/environment.log"
import importlib.metadata as md
import json
import platform
import subprocess
import sys

import torch


def version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


device = sys.argv[2]
env = {"python": platform.python_version(), "torch": torch.__version__,
       "cuda": torch.version.cuda, "device": device,
       "packages": {name: version(name) for name in (
           "datasets", "pyarrow", "fsspec", "numpy", "pandas", "sentencepiece", "sacrebleu",
           "hydra-core", "tensorboard", "eflomal", "ctranslate2")}}
if device.startswith("cuda") and torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    env |= {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count, "driver": driver or None}
elif device.startswith("cuda"):
    sys.exit(f"torch {torch.__version__} sees no CUDA device")
json.dump(env, open(sys.argv[1], "w"), indent=2)
print(json.dumps(env))
PYTHON
[[ ${PIPESTATUS[0]} -eq 0 ]] || failed+=("environment")

if [[ "$STAGES" == *" tests "* ]]; then
stage "1/4 tests: collection, -m gpu"
run_stage collect 120 "$PY" -m pytest -q --collect-only -p no:cacheprovider
if [[ "$DEVICE" == cuda* ]]; then  # every CUDA-parametrized test is marked gpu
    run_stage pytest_gpu 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu -rs
else  # the rehearsal: the same test bodies on the CPU
    run_stage pytest_gpu 240 "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py \
        tests/test_bf16.py -k cpu
fi
fi

if [[ "$STAGES" == *" benchmark "* ]]; then
stage "2/4 benchmark --preset iwslt on $DEVICE"
run_stage benchmark "${BENCH_LIMIT:-150}" "$PY" scripts/benchmark.py --preset iwslt --device "$DEVICE" \
    --variants "${variants[@]}" --steps "$BENCH_STEPS" --repeats "$BENCH_REPEATS" \
    --json "$dir/benchmark_iwslt.json" "${bench_args[@]}" -- "data.export_dir=$(realpath "$DING")" "${extra[@]}"
fi

if [[ "$STAGES" == *" compare "* ]]; then
compare_stage compare "3/4 docs_de_en" docs_de_en_gpu "$COMPARE_SECONDS" "$DECODE_RESERVE" 240 \
    "$JOBS" "$DOCS" runs "${variants[@]}"
fi
if [[ "$STAGES" == *" compare_ko "* ]]; then
compare_stage compare_ko "3b/4 debian_en_ko" debian_en_ko_gpu "$KO_SECONDS" "$KO_DECODE_RESERVE" \
    200 "${#ko_variants[@]}" "$KO" runs_ko "${ko_variants[@]}"
fi

stage "4/4 the figures"
"$PY" - "$dir" "${failed[*]:-}" <<'PYTHON'
import json
import re
import sys
from pathlib import Path

out, failed = Path(sys.argv[1]), sys.argv[2].split()
logs = out / "logs"


def read(name: str) -> dict | None:
    path = out / name
    return json.loads(path.read_text()) if path.is_file() else None


def counts(log: str) -> dict[str, int]:
    text = (logs / log).read_text(errors="replace") if (logs / log).is_file() else ""
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|tests? "
                                             r"collected|deselected)", text)}


compare = read("compare/compare.json")
runs = {p.parent.name: json.loads(p.read_text())
        for p in sorted(out.glob("runs/compare/*/*/metrics.json"))}
runs_ko = {p.parent.name: json.loads(p.read_text())
           for p in sorted(out.glob("runs_ko/compare/*/*/metrics.json"))}
summary = {"failed_stages": failed, "environment": read("environment.json"),
           "collect": counts("collect.log"), "pytest_gpu": counts("pytest_gpu.log"),
           "benchmark_iwslt": read("benchmark_iwslt.json"), "compare_docs_de_en": compare,
           "stopped_by": {variant: m.get("stopped_by") for variant, m in runs.items()},
           "compare_debian_en_ko": read("compare_ko/compare.json"),
           "stopped_by_debian_en_ko": {v: m.get("stopped_by") for v, m in runs_ko.items()}}
(out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
bench = (summary["benchmark_iwslt"] or {}).get("results", {})
rows = {v: study["row"] for v, study in (compare or {}).get("variants", {}).items()}
print(f"{'variant':<12} {'tokens/s':>10} {'MFU':>6} {'updates':>8} {'stopped by':>14} "
      f"{'test BLEU':>9} {'AER':>5}")
for variant in sorted(set(bench) | set(rows)):
    b, r = bench.get(variant, {}), rows.get(variant, {})
    mfu = b.get("mfu")
    print(f"{variant:<12} {b.get('train_tokens_per_s', float('nan')):>10,.0f} "
          f"{'-' if mfu is None else f'{100 * mfu:.0f}%':>6} {r.get('steps', '-'):>8} "
          f"{str(summary['stopped_by'].get(variant, '-')):>14} {r.get('test_bleu_beam5') or float('nan'):>9.2f} "
          f"{r.get('aer') or float('nan'):>5.2f}")
PYTHON
cp "$dir/compare/compare.md" "$dir/compare/compare_curves.png" "$dir" 2>/dev/null
cp "$dir/compare_ko/compare.md" "$dir/compare_debian_en_ko.md" 2>/dev/null
cp "$dir/compare_ko/compare_curves.png" "$dir/compare_debian_en_ko_curves.png" 2>/dev/null
tar -czf "$dir/logs.tar.gz" -C "$dir" logs $(cd "$dir" && ls -d runs*/compare/*/*/{metrics.json,console.log,train.log} 2>/dev/null)
rm -rf "$dir/logs" "$dir/environment.json"
[[ -d "$dir/compare" ]] && mv "$dir/compare/compare.json" "$dir/compare.json" 2>/dev/null
[[ -d "$dir/compare_ko" ]] && mv "$dir/compare_ko/compare.json" "$dir/compare_debian_en_ko.json" 2>/dev/null
rm -rf "$dir/compare" "$dir/compare_ko" "$dir/runs" "$dir/runs_ko" "$dir/benchmark_iwslt.json"
ls -la "$dir"
if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi
echo "gpu check passed"
