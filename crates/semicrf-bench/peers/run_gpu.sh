#!/usr/bin/env bash
# The GPU comparison, run on the GPU machine in one call: for each canonical shape given,
# our CPU streaming engine on every core, our CUDA streaming engine, and flash-semicrf 0.2.0's
# Triton kernels, on the same problem (f32 inputs).
#
# Here (the GPU machine has no Rust toolchain and no registry):
#   ../shared/tools/stage-gpu -p semicrf-bench --features cuda --bins
#   pip download --no-deps -d .gpu/wheels flash-semicrf==0.2.0
# There, with `.gpu` carried:
#   crates/semicrf-bench/peers/run_gpu.sh S1 S2 S3 S4 S5 S6 S7
#
# Environment: WORK (problem files, default /tmp/semicrf-gpu-peers), OURS_REPEATS (default
# 31), FLASH_REPEATS (default 5; 1 beyond S3), FLASH_TIMEOUT (seconds per shape, default 300).
# Results: results/gpu/{ours,ours_cuda,flash}_{S}.json and the table (table.py --gpu).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=${WORK:-/tmp/semicrf-gpu-peers}
OURS_REPEATS=${OURS_REPEATS:-31}
FLASH_TIMEOUT=${FLASH_TIMEOUT:-300}
EXPORT=$ROOT/.gpu/bin/bin-export_problem
RES="$HERE/results/gpu"
mkdir -p "$WORK" "$RES"
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$ROOT"/.gpu/wheels/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

for S in "$@"; do
  echo "== $S"
  paths=$("$EXPORT" --shape "$S" --out "$WORK" --repeats "$OURS_REPEATS")
  problem=$(echo "$paths" | sed -n 1p)
  cpu=$(echo "$paths" | sed -n 2p)
  cuda=$("$EXPORT" --shape "$S" --out "$WORK" --repeats "$OURS_REPEATS" --engine cuda | sed -n 2p)
  for pair in "$cpu:ours" "$cuda:ours_cuda"; do
    python3 - "${pair%%:*}" "$RES/${pair##*:}_$S.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for k in ("grad_scores", "grad_duration"):
    doc.pop(k, None)
json.dump(doc, open(sys.argv[2], "w"), indent=1)
PY
  done
  case $S in S1|S2|S3) reps=${FLASH_REPEATS:-5} ;; *) reps=1 ;; esac
  timeout "$FLASH_TIMEOUT" python3 "$HERE/run_flash.py" --problem "$problem" --ours "$cuda" \
    --out "$RES/flash_$S.json" --device cuda --dtype float32 --repeats "$reps" --warmup 1 ||
    echo "flash-semicrf: stopped (exit $?) at $S"
done
python3 "$HERE/table.py" --gpu
