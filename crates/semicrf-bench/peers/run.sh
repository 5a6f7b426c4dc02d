#!/usr/bin/env bash
# Side-by-side comparison with the peers on the canonical shapes given (default: S1 S2 S3).
#
#   crates/semicrf-bench/peers/run.sh [S1 S2 S3 S4 ...]
#
# Environment:
#   PY            python of a venv with torch, flash-semicrf, torch-struct (default /tmp/peers/bin/python)
#   WORK          where problem files go (default /tmp/semicrf-peers; not committed, up to ~10 MB each)
#   TS_SHAPES     shapes torch-struct is tried on (default "S1"; it did not finish S2 in 500 s)
#   FLASH_TIMEOUT, TS_TIMEOUT   seconds per peer run (default 900 and 600)
#   TS_REPEATS    timed runs of torch-struct (default 3)
#   OURS_REPEATS  timed runs of ours (default 21)
#   OURS_ONLY=1   re-time ours only (the peers' result files are kept)
#   CARGO_TARGET_DIR            as for cargo
# Results: results/{ours,flash,torch_struct}_{S}.json, then the table (table.py).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
PY=${PY:-/tmp/peers/bin/python}
WORK=${WORK:-/tmp/semicrf-peers}
TS_SHAPES=${TS_SHAPES-S1}
FLASH_TIMEOUT=${FLASH_TIMEOUT:-900}
TS_TIMEOUT=${TS_TIMEOUT:-600}
OURS_REPEATS=${OURS_REPEATS:-21}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SHAPES=("$@")
[ ${#SHAPES[@]} -eq 0 ] && SHAPES=(S1 S2 S3)
RES="$HERE/results"
mkdir -p "$WORK" "$RES"

(cd "$ROOT" && cargo build --release -q -p semicrf-bench --bin export_problem)

# Marks a result file that a timeout cut short (keeping the phases it finished).
mark_timeout() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, os, sys
path, secs = sys.argv[1], int(sys.argv[2])
doc = json.load(open(path)) if os.path.exists(path) else {}
doc["status"] = f"timeout after {secs} s (during {'backward' if 'forward_ms' in doc else 'forward'})"
doc["timeout_s"] = secs
json.dump(doc, open(path, "w"), indent=1)
PYEOF
}

for S in "${SHAPES[@]}"; do
  echo "== $S"
  paths=$("$TARGET/release/export_problem" --shape "$S" --out "$WORK" --repeats "$OURS_REPEATS")
  problem=$(echo "$paths" | sed -n 1p)
  ours=$(echo "$paths" | sed -n 2p)
  # A slim copy of ours for the results (no gradients).
  "$PY" - "$ours" "$RES/ours_$S.json" <<'PYEOF'
import json, sys
import os, time
d = json.load(open(sys.argv[1]))
for k in ("grad_scores", "grad_duration"):
    d.pop(k, None)
d["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
d["loadavg_1min"] = os.getloadavg()[0]
json.dump(d, open(sys.argv[2], "w"), indent=1)
print(f"ours ({d['engine']}): forward {d['forward_ms']:.3f} ms, forward+backward {d['backward_ms']:.3f} ms")
PYEOF
  if [ "${OURS_ONLY:-0}" = 1 ]; then continue; fi
  case "$S" in
    S1|S2) frep=5; fwarm=1 ;;
    S3) frep=3; fwarm=0 ;;
    *) frep=1; fwarm=0 ;;
  esac
  out="$RES/flash_$S.json"
  rm -f "$out"
  rc=0
  timeout "$FLASH_TIMEOUT" "$PY" "$HERE/run_flash.py" --problem "$problem" --ours "$ours" \
      --out "$out" --repeats $frep --warmup $fwarm || rc=$?
  if [ $rc -eq 124 ]; then
    mark_timeout "$out" "$FLASH_TIMEOUT"
    echo "flash-semicrf: stopped after $FLASH_TIMEOUT s"
  fi
  if [[ " $TS_SHAPES " == *" $S "* ]]; then
    out="$RES/torch_struct_$S.json"
    rm -f "$out"
    rc=0
    timeout "$TS_TIMEOUT" "$PY" "$HERE/run_torch_struct.py" --problem "$problem" \
        --ours "$ours" --out "$out" --repeats "${TS_REPEATS:-3}" --warmup 0 || rc=$?
    if [ $rc -eq 124 ]; then
      mark_timeout "$out" "$TS_TIMEOUT"
      echo "torch-struct: stopped after $TS_TIMEOUT s"
    fi
  fi
done
"$PY" "$HERE/table.py"
