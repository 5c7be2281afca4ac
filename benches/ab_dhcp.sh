#!/usr/bin/env bash
# Before/after of one lever (issue 19): two builds of shardboot in the closed loop of
# benches/profile_dhcp.sh (no perf), alternated run by run so that the machine's drift
# falls on both, then each build's median and spread of server CPU per exchange (user,
# kernel, both) and of exchanges/s. This machine varies by ±15 % from one run to the
# next: a single pair of runs says nothing about a 1 µs lever. Run as root.
#
#   benches/ab_dhcp.sh BEFORE-BINARY AFTER-BINARY [runs] [seconds]
#
# e.g. `git stash; cargo build --release; cp target/release/shardboot /tmp/before;
# git stash pop; cargo build --release; benches/ab_dhcp.sh /tmp/before target/release/shardboot`.
# FAMILY=6 compares two builds on DHCPv6 (profile_dhcp.sh FAMILY=6: examples/dhcp6_load).
# Traffic stays inside the namespaces profile_dhcp.sh makes; each run is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
before=$(realpath "$1"); after=$(realpath "$2")
runs=${3:-5}
secs=${4:-8}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$runs"); do
  for build in before after; do
    bin=$before; [ "$build" = after ] && bin=$after
    line=$(SB_BIN="$bin" PERF=0 bash benches/profile_dhcp.sh "$secs" 2>&1 \
      | awk '/^exchanges/ {rate = $4} /all threads/ {print rate, $3, $5, $7}')
    [ -n "$line" ] || { echo "run $i of $build did not complete" >&2; exit 1; }
    echo "$build $line" | tee -a "$out" >&2
  done
done
echo
echo "closed loop, $runs runs of ${secs} s per build, alternated; median (min–max)"
printf '%-8s %22s %22s %22s %22s\n' build "exchanges/s" "user us" "kernel us" "CPU us/exchange"
for build in before after; do
  printf '%-8s' "$build"
  for col in 2 3 4 5; do
    grep "^$build " "$out" | awk -v c="$col" '{print $c + 0}' | sort -n | awk '
      { v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf " %22s", sprintf("%.1f (%.1f–%.1f)", m, v[1], v[NR]) }'
  done
  echo
done
