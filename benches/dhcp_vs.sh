#!/usr/bin/env bash
# DHCP throughput, side by side in one run: Kea's perfdhcp against shardboot, dnsmasq and
# Kea, each serving the same /16 on one side of a veth pair between two namespaces.
# Prints 4-way exchanges per second for each and the ratios. Run as root.
#
#   benches/dhcp_vs.sh [seconds-per-server] [perfdhcp-rate]
#
# shardboot: every lease flushed to disk (sled) before its ACK.
# dnsmasq:   Debian's, --no-ping (it otherwise pings each address first), lease file on.
# Kea:       kea-dhcp4 with multi-threading and memfile persist=true (appends without fsync).
# Traffic stays inside the two namespaces made here; every run is bounded by perfdhcp -p.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/rows.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
secs=${1:-10}
rate=${2:-40000}
clients=50000

tests/install-deps.sh
cargo build --release --locked -q
cargo build --release --locked -q --example dhcp_load
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot"
load="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/dhcp_load"
window=${WINDOW:-256}
# perfdhcp has already leased up to $clients addresses of the 65,000 when the closed loop
# runs, so the closed loop uses its own, smaller set of MACs.
load_clients=${LOAD_CLIENTS:-10000}

tag="sbvs$$"
. benches/veth_pair.sh
measure() { # name → prints "<4-way/s> <server CPU µs per exchange>"
  local out before after acks
  before=$(cpu_ticks "$server_pid")
  out=$(cd "$work" && ip netns exec "$cli" perfdhcp -4 -r "$rate" -R "$clients" -p "$secs" -W 1000000 -l 198.18.0.2 198.18.0.1 2>&1 || true)
  after=$(cpu_ticks "$server_pid")
  echo "$out" > "$work/perfdhcp-$1.txt"
  acks=$(echo "$out" | awk '/REQUEST-ACK/ {f=1} f && /received packets/ {print $3; exit}')
  echo "$(echo "$out" | awk '/^Rate:/ {print $2; exit}') $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="${acks:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }')"
}

# Closed loop: examples/dhcp_load keeps $window exchanges in flight (veth_pair.sh's
# closed_loop).
measure_closed() {
  closed_loop "$work/load-$1.txt" "$load" --relay 198.18.0.2 --server 198.18.0.1
}

start shardboot
read -r r_sb c_sb <<< "$(measure shardboot)"
read -r l_sb lc_sb lost_sb dup_sb lk_sb <<< "$(measure_closed shardboot)"; stop

start dnsmasq
read -r r_dm c_dm <<< "$(measure dnsmasq)"
read -r l_dm lc_dm lost_dm dup_dm lk_dm <<< "$(measure_closed dnsmasq)"; stop

start kea
read -r r_kea c_kea <<< "$(measure kea)"
read -r l_kea lc_kea lost_kea dup_kea lk_kea <<< "$(measure_closed kea)"; stop

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "n/a" }'; }
echo
echo "perfdhcp -r $rate -R $clients -p $secs, relayed over veth, $(nproc) cores"
echo "(perfdhcp itself is the limit near 10,000/s on 2 cores: its receive buffer overflows;"
echo " server CPU per exchange shows each server's own cost)"
printf '%-10s %12s %22s\n' server "4-way/s" "server CPU us/exchange"
printf '%-10s %12s %22s\n' shardboot "$r_sb" "$c_sb" dnsmasq "$r_dm" "$c_dm" kea "$r_kea" "$c_kea"
echo "rate      shardboot / Kea: $(ratio "$r_sb" "$r_kea")x   shardboot / dnsmasq: $(ratio "$r_sb" "$r_dm")x"
echo "CPU cost  Kea / shardboot: $(ratio "$c_kea" "$c_sb")x   dnsmasq / shardboot: $(ratio "$c_dm" "$c_sb")x"
echo
echo "closed loop (examples/dhcp_load, $window exchanges in flight, $load_clients clients, ${secs} s each)"
printf '%-10s %12s %22s %16s %8s %11s\n' server "4-way/s" "server CPU us/exchange" "of which kernel" lost duplicates
printf '%-10s %12s %22s %16s %8s %11s\n' shardboot "$l_sb" "$lc_sb" "$lk_sb" "$lost_sb" "$dup_sb" \
  dnsmasq "$l_dm" "$lc_dm" "$lk_dm" "$lost_dm" "$dup_dm" kea "$l_kea" "$lc_kea" "$lk_kea" "$lost_kea" "$dup_kea"
echo "rate      shardboot / Kea: $(ratio "$l_sb" "$l_kea")x   shardboot / dnsmasq: $(ratio "$l_sb" "$l_dm")x"
row "DHCP closed loop ($window in flight), 4-way exchanges/s" "$l_sb" "$l_kea" "Kea" higher
row "DHCP closed loop, server CPU per exchange" "$lc_sb" "$lc_kea" "Kea" lower " µs"
row "DHCP closed loop, server kernel CPU per exchange" "$lk_sb" "$lk_kea" "Kea" lower " µs"
row "DHCP closed loop, 4-way exchanges/s" "$l_sb" "$l_dm" "dnsmasq" higher
row "DHCP perfdhcp -r $rate, server CPU per exchange" "$c_sb" "$c_kea" "Kea" lower " µs"
