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
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
