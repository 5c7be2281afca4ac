#!/usr/bin/env bash
# Checks the manifests offline: the Kubernetes schema (kubernetes-validate from PyPI, in
# a venv inside the build tree), the containers of IrSO overrides as core/v1
# Containers, and `shardboot check-config` for every embedded shardboot environment.
#
#   deploy/kubernetes/check.sh [FILE...]        default: every manifest here
#   SHARDBOOT=path/to/shardboot                 default: target/{release,debug}/shardboot
#
# Custom resources without a schema here (PodMonitor, Ironic) get a warning from
# kubernetes-validate; the parts of them that are core types are checked as such.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
VENV=${SB_KUBE_VENV:-$TARGET_DIR/kubernetes-validate-venv}
SPEC='kubernetes-validate==1.37.*'
MARKER=$VENV/.shardboot-ready

mkdir -p "$(dirname "$VENV")"
# One setup at a time (the tests run this script in parallel).
exec 9>"$VENV.lock"
flock 9
if [ ! -f "$MARKER" ]; then
  python3 -m venv --clear "$VENV"
  "$VENV/bin/pip" install --quiet "$SPEC"
  touch "$MARKER"
fi
flock -u 9
if [ -z "${SHARDBOOT:-}" ]; then
  for b in "$TARGET_DIR/release/shardboot" "$TARGET_DIR/debug/shardboot"; do
    [ -x "$b" ] && SHARDBOOT=$b && break
  done
fi
[ -n "${SHARDBOOT:-}" ] || { echo "check.sh: no shardboot binary; build it or set SHARDBOOT" >&2; exit 2; }

if [ $# -eq 0 ]; then
  set -- "$HERE"/*.yaml
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/kubernetes-validate" --strict --quiet "$@"
"$VENV/bin/python" "$HERE/embedded.py" pods "$work/overrides.yaml" "$@"
if [ -s "$work/overrides.yaml" ] && [ "$(cat "$work/overrides.yaml")" != "[]" ]; then
  "$VENV/bin/kubernetes-validate" --strict --quiet "$work/overrides.yaml"
fi
"$VENV/bin/python" "$HERE/embedded.py" check "$SHARDBOOT" "$@"
