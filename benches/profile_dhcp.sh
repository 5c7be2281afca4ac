#!/usr/bin/env bash
# Where shardboot's CPU goes in the DHCP closed loop (issue 19: "profile first"): the
# same veth pair and closed loop as benches/dhcp_vs.sh, shardboot alone, with its CPU
# split by thread (from /proc) and `perf record -g` over the whole run. Prints the CPU
# per exchange of each thread and perf's top symbols; the perf data stays in
# $PERF_OUT (default /tmp/shardboot-dhcp.perf) for `perf report -i`. Run as root.
#
#   benches/profile_dhcp.sh [seconds]
#
# FAMILY=6 runs the DHCPv6 twin instead: the same veth pair with the v6 lab of
# veth_pair6.sh, and examples/dhcp6_load (relayed Solicit, Advertise, Request, Reply,
# the same window and clients), so v4 and v6 are measured by the same kind of load.
#
# PERF=0 leaves perf out (the per-thread split alone, without perf's own cost); SB_BIN
# runs another build of shardboot (a before/after comparison of one lever).
#
# Traffic stays inside the two namespaces veth_pair.sh makes; the load is bounded by
# its --seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
secs=${1:-10}
window=${WINDOW:-256}
load_clients=${LOAD_CLIENTS:-10000}
perf_out=${PERF_OUT:-/tmp/shardboot-dhcp.perf}
use_perf=${PERF:-1}
[ "$use_perf" = 0 ] || command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 1; }

cargo build --release --locked -q
family=${FAMILY:-4}
cargo build --release --locked -q --example dhcp_load --example dhcp6_load
target=${CARGO_TARGET_DIR:-$PWD/target}
bin=${SB_BIN:-$target/release/shardboot}

tag="sbpf$$"
. benches/veth_pair.sh
case $family in
  4) load=("$target/release/examples/dhcp_load" --relay 198.18.0.2 --server 198.18.0.1) ;;
  6) . benches/veth_pair6.sh
     load=("$target/release/examples/dhcp6_load" --relay "$relay6" --server "$server6") ;;
  *) echo "FAMILY must be 4 or 6" >&2; exit 2 ;;
esac

# Each thread's name with its user and its system ticks.
thread_ticks() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s %s\n' "$(tr ' ' '_' < "$t/comm")" "$(awk '{print $14, $15}' "$t/stat")"
  done | awk '{ u[$1] += $2; k[$1] += $3 } END { for (n in u) print n, u[n], k[n] }' | sort
}

if [ "$family" = 6 ]; then start6 shardboot; else start shardboot; fi
before=$(thread_ticks "$server_pid")
perf_pid=
if [ "$use_perf" != 0 ]; then
  perf record -q -g -F 999 -p "$server_pid" -o "$perf_out" -- sleep "$((secs + 1))" 2>/dev/null &
  perf_pid=$!
fi
out=$(timeout $((secs + 30)) ip netns exec "$cli" "${load[@]}" \
      --seconds "$secs" --window "$window" --clients "$load_clients" 2>&1 || true)
after=$(thread_ticks "$server_pid")
[ -z "$perf_pid" ] || wait "$perf_pid" || true
stop
n=$(echo "$out" | awk '/^exchanges/ {print $2; exit}')
echo "$out" | grep '^exchanges' || { echo "the closed loop did not run:"; echo "$out"; exit 1; }
hz=$(getconf CLK_TCK)
echo
echo "server CPU per exchange by thread ($n exchanges, ${secs} s, $window in flight)"
printf '  %-20s %9s %9s %9s\n' thread user kernel both
join <(echo "$before") <(echo "$after") | awk -v n="$n" -v hz="$hz" '
  function us(t) { return t / hz * 1e6 / n }
  { du = $4 - $2; dk = $5 - $3; tu += du; tk += dk
    if (du + dk > 0) printf "  %-20s %6.1f us %6.1f us %6.1f us\n", $1, us(du), us(dk), us(du + dk) }
  END { printf "  %-20s %6.1f us %6.1f us %6.1f us\n", "all threads", us(tu), us(tk), us(tu + tk) }'
[ "$use_perf" != 0 ] || exit 0
echo
echo "perf: top symbols (self time, all threads)"
perf report -i "$perf_out" --no-children --sort comm,sym --stdio 2>/dev/null \
  | grep -E '^ +[0-9]' | head -40
