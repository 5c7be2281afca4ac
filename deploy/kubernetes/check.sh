#!/usr/bin/env bash
# Checks the kustomize overlays offline. Each overlay is rendered (kustomize or
# `kubectl kustomize` when installed, and always render.py, which must agree with it),
# then: the Kubernetes schema (kubernetes-validate from PyPI, in a venv inside the build
# tree), the containers of IrSO overrides as core/v1 Containers, the Ironic resources
# against IrSO's CRD (crds/), the alert expressions against the metrics the source
# renders, and `shardboot check-config` for every embedded shardboot environment.
#
#   deploy/kubernetes/check.sh [OVERLAY-DIR|FILE...]   default: every overlays/*
#   SHARDBOOT=path/to/shardboot                 default: target/{release,debug}/shardboot
#   SB_KUSTOMIZE=none                           render.py alone, as where neither is installed
#
# PodMonitor and PrometheusRule have no schema here: kubernetes-validate warns; their
# metric names are checked instead.
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
  set -- "$HERE"/overlays/*/
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PY=$VENV/bin/python
KUSTOMIZE=()
if [ "${SB_KUSTOMIZE:-}" = none ]; then
  :
elif command -v kustomize >/dev/null; then
  KUSTOMIZE=(kustomize build)
elif command -v kubectl >/dev/null; then
  KUSTOMIZE=(kubectl kustomize)
fi
files=()
mkdir -p "$work/overlays"
for arg in "$@"; do
  if [ -d "$arg" ]; then
    # Named overlays/<dir>.yaml in what follows, whatever tree it came from.
    out=$work/overlays/$(basename "$arg").yaml
    "$PY" "$HERE/render.py" "$arg" "$out"
    if [ ${#KUSTOMIZE[@]} -gt 0 ]; then
      "${KUSTOMIZE[@]}" "$arg" >"$work/kustomize.yaml"
      "$PY" "$HERE/render.py" same "$out" "$work/kustomize.yaml"
      echo "overlays/$(basename "$arg"): rendered by ${KUSTOMIZE[*]} and render.py alike"
    else
      echo "overlays/$(basename "$arg"): rendered by render.py alone"
    fi
    files+=("$out")
  else
    files+=("$arg")
  fi
done
"$VENV/bin/kubernetes-validate" --strict --quiet "${files[@]}"
"$PY" "$HERE/embedded.py" pods "$work/overrides.yaml" "${files[@]}"
if [ -s "$work/overrides.yaml" ] && [ "$(cat "$work/overrides.yaml")" != "[]" ]; then
  "$VENV/bin/kubernetes-validate" --strict --quiet "$work/overrides.yaml"
fi
"$PY" "$HERE/embedded.py" crd "$HERE"/crds/*.yaml -- "${files[@]}"
# The metric names the server renders: every name in its source.
grep -rhoE 'shardboot_[a-z_0-9]+' "$REPO/src" | sort -u >"$work/metrics"
"$PY" "$HERE/embedded.py" rules "$work/metrics" "${files[@]}"
"$PY" "$HERE/embedded.py" check "$SHARDBOOT" "${files[@]}"
