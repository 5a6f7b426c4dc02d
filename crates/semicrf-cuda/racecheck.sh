#!/usr/bin/env bash
# compute-sanitizer's racecheck on every test of a CUDA test binary, each test in its own
# process and all at once, spread over the machine's GPUs:
#
#   crates/semicrf-cuda/racecheck.sh TEST_BINARY [SECONDS]
#
# e.g. with the binary of tests/cuda.rs built with `cargo test --release --features cuda
# --test cuda --no-run`. Tests listed in $WHOLE run with every kernel checked; the others run
# once per group of kernels (`--kernel-regex`), which is several times faster than checking
# every kernel in one process. The groups cover every kernel of kernels/*.cu: streaming.cu's
# `fwd_*`/`bwd_*`, meet.cu's `meet_fwd*`, `meet_save*`, `meet_bwd*` and `meet_z_log`, io.cu's
# `check_input`, `meet_sum` and `narrow*`, edge.cu's `edge_*`, kbest.cu's `kbest_fwd`. SECONDS (default 540) bounds
# each process. Prints each process's last lines and exits non-zero unless every process ended
# with its test passed and "0 hazards displayed (0 errors, 0 warnings)".
set -u
bin=$1
limit=${2:-540}
export SEMICRF_REQUIRE_GPU=1
ngpu=$(nvidia-smi -L | wc -l)
logs=$(mktemp -d)
groups=('^(fwd|bwd)_' '^meet_fwd' '^meet_save' '^meet_bwd' '^(meet_z|meet_sum|check_input|narrow|edge_|kbest_)')
whole=" ${WHOLE:-} "
n=0
run() { # log-name, filter arguments...
  local log=$1; shift
  n=$((n + 1))
  (CUDA_VISIBLE_DEVICES=$((n % ngpu)) timeout "$limit" compute-sanitizer --tool racecheck \
    --error-exitcode 9 "$@" "$bin" --exact "$name" --test-threads=1 > "$logs/$log" 2>&1
   echo "exit $?" >> "$logs/$log") &
}
for name in $("$bin" --list 2>/dev/null | sed -n 's/: test$//p'); do
  if [[ $whole == *" $name "* ]]; then
    run "$name.all.log"
  else
    i=0
    for g in "${groups[@]}"; do
      i=$((i + 1))
      run "$name.g$i.log" --kernel-regex "kns=$g"
    done
  fi
done
wait
fail=0
for f in "$logs"/*.log; do
  echo "== $(basename "$f" .log): $(tail -1 "$f")"
  grep -E 'RACECHECK SUMMARY|test result' "$f"
  grep -q '0 hazards displayed (0 errors, 0 warnings)' "$f" && grep -q '^exit 0$' "$f" || fail=1
done
exit $fail
