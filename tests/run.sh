#!/usr/bin/env bash
# The whole test suite: lints, unit tests, and integration tests with real clients in
# network namespaces. Run as root (namespaces, port 67).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if [ "$(id -u)" != 0 ]; then
  echo "tests/run.sh: run as root (network namespaces and port 67)" >&2
  exit 1
fi
tests/install-deps.sh
# The real Ironic the owner-routing tests run against: a venv inside target/.
tests/ironic/lab.sh setup
cargo fmt --all -- --check
# config stays a leaf over leaf helpers, and no modules import each other in a circle.
tests/module_graph.py
cargo clippy --all-targets --locked -- -D warnings
# The power-cut file system the store tests mount (tests/common/powercut.rs runs it).
cargo build --locked --example powercut_fs
# A test whose prerequisite is missing fails (tests/common: skip_or_fail). The one
# prerequisite a machine may lack for good, the kernel's netem qdisc (some VM kernels
# have no sch_netem), is allowed to be missing only when a probe in a scratch namespace
# finds it missing, and the run says so; its lossy-relay twin covers loss anyway.
probe=sbnetem$$
allow=""
ip netns add "$probe"
if ! ip netns exec "$probe" tc qdisc add dev lo root netem loss 1% 2>/dev/null; then
  allow=netem
  echo "tests/run.sh: this kernel has no netem qdisc: downloads_complete_under_netem_loss is skipped" >&2
fi
ip netns del "$probe"
export SB_ALLOW_SKIP="$allow"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --all-targets --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole suite (cargo prints one per test binary, and the last
# binary, a criterion bench in test mode, has no tests of its own). It counts what
# really ran: libtest counts a test that skipped (tests/common/skip.rs: it printed
# "SKIPPED: <binary>::<test> (<what>): <reason>" and returned) as passed, so those are
# named and counted within the passes, by what was missing; ignored tests are counted
# too. A skip line may follow another test's "test … " on the same line, hence -o.
skips=$(grep -o 'SKIPPED: .*' "$log" || true)
if [ -n "$skips" ]; then
  echo "tests skipped:"
  printf '%s\n' "$skips" | sed 's/^SKIPPED: /  /'
fi
printf '%s\n' "$skips" | awk -v results="$log" '
  /^SKIPPED: / { if (match($0, / \([^)]*\):/)) { what = substr($0, RSTART + 2, RLENGTH - 4); n[what]++; k++ } }
  END {
    while ((getline line < results) > 0) {
      if (line ~ /^test result:/) { split(line, w, " "); p += w[4]; f += w[6]; i += w[8] }
    }
    why = ""
    for (m in n) why = why (why == "" ? "" : ", ") n[m] " " m
    skipped = k ? sprintf(" (%d of them skipped: %s)", k, why) : ""
    printf "tests: %d passed%s, %d failed, %d ignored\n", p, skipped, f, i
  }'
exit "$status"
