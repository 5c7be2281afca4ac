#!/usr/bin/env bash
# Builds the fuzz crate and runs every target for SECONDS each (default 20), from a
# scratch copy of its committed seed corpus (fuzz/corpus/<target>/ stays as committed).
# Prints the executions per target; exits non-zero if any target crashes, hangs past
# its bound or fails to build. Crash inputs land in fuzz/artifacts/<target>/.
#
# Sanitizer none: the fuzzed code has no `unsafe` (only sockets and ioctls do), so
# AddressSanitizer would only halve the executions; debug assertions (-a) stay on so an
# integer overflow is a crash, not a silent wrap.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
unset CARGO_TARGET_DIR # the fuzz crate builds into fuzz/target
flags=(--sanitizer none --debug-assertions --release)
cargo +nightly fuzz build "${flags[@]}"
status=0
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo +nightly fuzz list); do
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  set +e
  # The outer timeout bounds a target whose libFuzzer run overstays (slow start, hang).
  timeout $((seconds + 60)) cargo +nightly fuzz run "${flags[@]}" "$target" \
    "$scratch/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1
  rc=$?
  set -e
  # The final stats line, or after a crash the last status line (#N: N inputs run).
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  [ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  if [ "$rc" = 0 ]; then
    echo "fuzz: $target: ${runs:-?} executions in ${seconds}s, no crash"
  else
    echo "fuzz: $target: FAILED (exit $rc) after ${runs:-?} executions" >&2
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|deadly signal|timeout' "$log" >&2 || tail -n 30 "$log" >&2
    status=1
  fi
done
exit "$status"
