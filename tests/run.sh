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
cargo clippy --all-targets --locked -- -D warnings
# The power-cut file system the store tests mount (tests/common/powercut.rs runs it).
cargo build --locked --example powercut_fs
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --all-targets --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole suite (cargo prints one per test binary, and the last
# binary, a criterion bench in test mode, has no tests of its own).
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
