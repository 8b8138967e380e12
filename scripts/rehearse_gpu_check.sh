#!/usr/bin/env bash
# The device check rehearsed here, as the lent GPU machine will meet it: a fresh clone of this
# repository's HEAD with only the carried folders (the wheelhouse subset and the corpus exports),
# a stand-in interpreter with a torch of its own (this Python's CPU build in a separate venv,
# with the packages the H200 has), no route to any registry (a network namespace of its own:
# unshare -rn), and cpu for cuda with tiny budgets: install, test collection, the CPU twins of
# the GPU tests, the benchmark and a tiny comparison, through scripts/gpu_check.sh itself; then
# the second device call (STAGES=compare_ko), the seeds' pair from its export.
#
# Usage: scripts/rehearse_gpu_check.sh [WORK_DIR]   (make rehearse-gpu-check; default
# /tmp/seq2seq-rehearsal, emptied first). Needs the registry for its first step only (the
# wheelhouse and the stand-in), .venv and the corpora built (make corpus; data=docs_de_en).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
work="${1:-/tmp/seq2seq-rehearsal}"
python="${PYTHON:-python3}"
tag="$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
say() { printf '\n=== [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

say "1. here, online: what the device call carries"
if [[ ! -f "wheelhouse/$tag-h200/requirements.txt" ]]; then
    make wheelhouse PYTHON="$python" EXTRAS= EXCLUDE=scripts/preinstalled/h200.txt \
        FALLBACKS=scripts/preinstalled/h200-fallbacks.txt
fi
# each corpus with the vocabularies its GPU recipes train on (an export carries the tokenizers
# cached for it; one missing would be trained on the device, inside the deadline)
declare -A sizes=([ding_de_en]="" [docs_de_en]="8000 16000" [debian_en_ko]="8000")
for corpus in ding_de_en docs_de_en debian_en_ko; do
    [[ -f "data/export/$corpus/manifest.json" ]] && continue
    for size in ${sizes[$corpus]}; do
        .venv/bin/python -m seq2seq.prepare "data=$corpus" tokenizer=unigram \
            "tokenizer.vocab_size=$size" leakage=false
    done
    .venv/bin/python -m seq2seq.prepare "data=$corpus" leakage=false "export=data/export/$corpus"
done
du -sh "wheelhouse/$tag-h200" data/export

say "2. the stand-in interpreter: its own torch and what the H200 has, from the wheelhouse"
rm -rf "$work" && mkdir -p "$work"
"$python" -m venv "$work/standin"
"$work/standin/bin/pip" install --quiet torch==2.13.0
has="$("$python" - "wheelhouse/$tag" scripts/preinstalled/h200.txt <<'PYTHON'
import re
import sys
from pathlib import Path

def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

listed = {canonical(line.split("#")[0].strip())
          for line in Path(sys.argv[2]).read_text().splitlines() if line.split("#")[0].strip()}
wheels = {canonical(w.name.split("-")[0]) for w in Path(sys.argv[1]).glob("*.whl")}
print(" ".join(sorted(listed & wheels)))
PYTHON
)"
"$work/standin/bin/pip" install --quiet --no-index --find-links "wheelhouse/$tag" $has
"$work/standin/bin/pip" install --quiet pytest

say "3. a fresh clone of HEAD ($(git rev-parse --short HEAD)) with the carried folders only"
git clone --quiet "$root" "$work/clone"
mkdir -p "$work/clone/wheelhouse" "$work/clone/data"
cp -r "wheelhouse/$tag-h200" "$work/clone/wheelhouse/"
cp -r data/export "$work/clone/data/"

say "4. no route to any registry: the check on the CPU with tiny budgets"
unshare -rn env -i PATH="/usr/bin:/bin" HOME="$work" bash -c '
    set -euo pipefail
    if "$0" -c "import socket; socket.create_connection((\"pypi.org\", 443), timeout=5)" \
            2>/dev/null; then
        echo "the registry is reachable: not a rehearsal" >&2; exit 2
    fi
    echo "no route: pypi.org:443 cannot be reached from here"
    cd "$1/clone"
    PYTHON="$0" WHEELS="wheelhouse/$2-h200" DEVICE=cpu COMPARE_SECONDS=45 JOBS=2 \
        BENCH_STEPS=2 BENCH_REPEATS=1 BENCH_ARGS="--decode-sentences 8" BENCH_LIMIT=900 \
        COMPARE_LIMIT=1800 DEADLINE=3600 KO_SECONDS=45 KO_DECODE_RESERVE=600 \
        VARIANTS="vanilla bahdanau luong transformer" \
        EXTRA="trainer.threads=1 trainer.precision=auto trainer.eval_every=5 \
               trainer.eval_max_sentences=20 decoding.max_len_a=0.5 decoding.max_len_b=5" \
        scripts/gpu_check.sh "$1/out"
    echo "the second device call: STAGES=compare_ko, English-Korean at GPU compute"
    PYTHON="$0" WHEELS="wheelhouse/$2-h200" DEVICE=cpu STAGES=compare_ko DEADLINE=3600 \
        KO_SECONDS=45 KO_DECODE_RESERVE=600 \
        EXTRA="trainer.threads=1 trainer.precision=auto trainer.eval_every=5 \
               trainer.eval_max_sentences=20 decoding.max_len_a=0.5 decoding.max_len_b=5" \
        scripts/gpu_check.sh "$1/out_ko"
    "$0" -c "import json, sys; c = json.load(open(sys.argv[1]))[\"compare_debian_en_ko\"]; \
sys.exit(0 if c and set(c[\"variants\"]) == {\"bahdanau\", \"transformer\"} else \
\"the en-ko stage wrote no comparison of bahdanau and transformer\")" "$1/out_ko/gpu_check.json"
' "$work/standin/bin/python" "$work" "$tag"
say "rehearsal passed: $work/out and $work/out_ko (the en-ko call)"
