#!/usr/bin/env bash
# DHCPv6 throughput, side by side in one run: Kea's perfdhcp -6 against shardboot, Kea
# (kea-dhcp6) and dnsmasq, each on a fresh server serving the same /64 on one side of
# the veth pair of benches/veth_pair.sh. Prints Solicit/Advertise/Request/Reply
# exchanges per second (Replies received over the test period) and the server's CPU
# per exchange (utime + stime from /proc/<pid>/stat, before and after, over Replies
# received), and the ratios. Run as root.
#
#   benches/dhcp6_vs.sh [seconds-per-run] [perfdhcp-rate]     (MODE=direct, LOW_RATE=4000)
#
# Two runs per server, each on a fresh server and empty lease store: at the offered
# rate (40,000/s: every server at its limit, or perfdhcp at its own) and at LOW_RATE
# (4,000/s: the same work for every server that keeps up, so CPU per exchange compares
# like with like).
#
# How perfdhcp talks to the servers (MODE): "relay" (the default) is perfdhcp -A 1, one
# simulated relay agent sending Relay-forward to the server's address, fd00:18::1 port
# 547, from fd00:18::2 port 547, with that address as link-address and peer-address;
# every server picks the subnet by the link-address and answers with a Relay-reply to
# port 547. It is what the v4 bench (dhcp_vs.sh) measures, the relayed path. "direct"
# sends Solicits to ff02::1:2 on the link (perfdhcp -l without -A), answered on port
# 546. All three servers accept both (checked with this script in both modes):
#   shardboot: Relay-forward on 547 from any address, the subnet by the link-address
#              (inside a [[subnet6]] network); direct clients in ff02::1:2 on
#              dhcp6.interfaces. Every lease fsync-durable before its Reply.
#   Kea:       kea-dhcp6, multi-threaded (2 threads, queue 256, as dhcp_vs.sh), memfile
#              persist=true (appends each lease to a CSV, no fsync). Relayed traffic
#              comes unicast, so it needs its socket on the address ("<if>/fd00:18::1"
#              in interfaces-config), not only the link-local and multicast ones.
#   dnsmasq:   Debian's, a v6 dhcp-range "start,end,64,1h" (the prefix length names the
#              link a relay's link-address must fall in), --dhcp-lease-max raised from
#              its 1,000 default, DNS off (--port=0). --no-ping does not apply: dnsmasq
#              pings only before DHCPv4 offers. It rewrites and fsyncs its whole lease
#              file on every change, as for v4.
#
# perfdhcp's socket takes net.core.rmem_default (208 KiB here), and at these rates
# perfdhcp's own receive buffer overflows before the servers' (at 40,000/s shardboot
# sent every reply and 22 % of them were dropped at perfdhcp's socket): the script
# raises it to 32 MiB for the run, for every server alike, and puts the old value back
# on exit (as boot_storm.sh). Kernel drops on each side are printed (Udp6RcvbufErrors
# of each namespace).
#
# Traffic stays inside the two namespaces made here; every run is bounded by perfdhcp
# -p and a timeout.
set -euo pipefail
# Exchange lines (target `exchange`, one per DHCP message or transfer) off, as Kea
# runs at WARN and dnsmasq without log-dhcp here: the figures compare the servers' work.
export SHARDBOOT_LOG="${SHARDBOOT_LOG:-info,exchange=warn}"
cd "$(dirname "$0")/.."
. benches/rows.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
secs=${1:-10}
rate=${2:-40000}
low=${LOW_RATE:-4000}
mode=${MODE:-relay}
clients=50000

tests/install-deps.sh
cargo build --release --locked -q
cargo build --release --locked -q --example dhcp_load --example dhcp6_load
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot"
examples="${CARGO_TARGET_DIR:-$PWD/target}/release/examples"
# The closed loop (as dhcp_vs.sh's): $window exchanges in flight over $load_clients.
window=${WINDOW:-256}
load_clients=${LOAD_CLIENTS:-10000}
# Raw outputs kept for a closer look (perfdhcp's reports, the servers' logs).
raw="$PWD/target/dhcp6_vs"
rm -rf "$raw"; mkdir -p "$raw"

tag="sb6v$$"
. benches/veth_pair.sh
. benches/veth_pair6.sh

old_rmem=$(sysctl -n net.core.rmem_default)
on_exit sysctl -qw net.core.rmem_default="$old_rmem"
sysctl -qw net.core.rmem_default=33554432

case $mode in
  relay) perfdhcp_to=(-A 1 -l "$cif" "$server6") ;;
  direct) perfdhcp_to=(-l "$cif" all) ;;
  *) echo "MODE must be relay or direct" >&2; exit 2 ;;
esac

# UDP datagrams the kernel dropped for want of receive buffer in namespace $1 (every
# IPv6 UDP socket there: the server's, or perfdhcp's).
rcvbuf_drops() { ip netns exec "$1" awk '$1 == "Udp6RcvbufErrors" {print $2}' /proc/net/snmp6; }

# measure NAME RATE: sets res[NAME.RATE] to "<4-way/s> <server CPU µs per exchange>
#   <Replies received> <Solicits sent> <drops at the server> <drops at perfdhcp>".
# Not in a subshell, so the EXIT trap of veth_pair.sh always knows the running server.
declare -A res
measure() {
  local name=$1 r=$2 out before after sd cd replies solicits
  start6 "$name"
  before=$(cpu_ticks "$server_pid"); sd=$(rcvbuf_drops "$srv"); cd=$(rcvbuf_drops "$cli")
  out=$(cd "$work" && timeout $((secs + 30)) ip netns exec "$cli" perfdhcp -6 -r "$r" -R "$clients" -p "$secs" -W 1000000 \
        "${perfdhcp_to[@]}" 2>&1 || true)
  after=$(cpu_ticks "$server_pid")
  sd=$(( $(rcvbuf_drops "$srv") - sd )); cd=$(( $(rcvbuf_drops "$cli") - cd ))
  echo "$out" > "$raw/perfdhcp-$name-$r.txt"
  if [ "$name" = shardboot ]; then
    ip netns exec "$srv" curl -s --max-time 5 http://127.0.0.1:8080/metrics | grep '^shardboot_dhcp6' > "$raw/metrics-$name-$r.txt" || true
  fi
  stop
  cp "$work/$name.log" "$raw/$name-$r.log"
  if [ "$name" = kea ]; then cp "$work/kea6.log" "$raw/kea6-$r.log" 2>/dev/null || true; fi
  replies=$(echo "$out" | awk '/REQUEST-REPLY/ {f=1} f && /received packets/ {print $3; exit}')
  solicits=$(echo "$out" | awk '/SOLICIT-ADVERTISE/ {f=1} f && /sent packets/ {print $3; exit}')
  # Replies per second of the test period: perfdhcp's own "Rate:" divides by the period
  # plus its 1 s exit wait (-W), so it reads 10/11 of the rate in a 10 s run.
  res[$name.$r]="$(awk -v n="${replies:-0}" -v t="$secs" 'BEGIN { printf "%.0f", n / t }') \
$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="${replies:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }') \
${replies:-0} ${solicits:-0} $sd $cd"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for server in shardboot kea dnsmasq; do
  for r in "$rate" "$low"; do
    echo "== $server, perfdhcp -6 -r $r ($mode)" >&2
    measure "$server" "$r"
  done
done

# The closed loop, v6 and v4 side by side: examples/dhcp6_load against shardboot and
# Kea, then examples/dhcp_load against shardboot's DHCPv4 on the same veth pair, so the
# two families' cost per exchange is read in one run from one kind of generator
# (dnsmasq is left out here: at about 1,000 exchanges/s its perfdhcp figures above say
# enough). Each entry: "<4-way/s> <CPU µs/exchange> <lost> <duplicates> <kernel µs>".
declare -A loop
for server in shardboot kea; do
  echo "== $server, closed loop (dhcp6_load)" >&2
  start6 "$server"
  loop[$server]=$(closed_loop "$raw/loop6-$server.txt" "$examples/dhcp6_load" --relay "$relay6" --server "$server6")
  stop
done
echo "== shardboot DHCPv4, closed loop (dhcp_load)" >&2
start shardboot
loop[shardboot4]=$(closed_loop "$raw/loop4-shardboot.txt" "$examples/dhcp_load" --relay 198.18.0.2 --server 198.18.0.1)
stop

field() { # server rate n → the n-th figure of that run
  local a
  read -r -a a <<< "${res[$1.$2]}"
  echo "${a[$(($3 - 1))]}"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.1f", a / b; else print "n/a" }'; }

echo
echo "perfdhcp -6 -R $clients -p $secs, $mode ($([ "$mode" = relay ] && echo "-A 1 to $server6" || echo "to ff02::1:2")), over veth, $(nproc) cores,"
echo "each run on a fresh server; perfdhcp's receive buffer 32 MiB;"
echo "load average (1, 5, 15 min) before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg)"
for r in "$rate" "$low"; do
  echo
  echo "offered $r/s"
  printf '%-10s %10s %22s %10s %10s %13s %14s\n' server "4-way/s" "server CPU us/exchange" Replies Solicits "server drops" "perfdhcp drops"
  for s in shardboot kea dnsmasq; do
    printf '%-10s %10s %22s %10s %10s %13s %14s\n' "$s" ${res[$s.$r]}
  done
  echo "rate      shardboot / Kea: $(ratio "$(field shardboot "$r" 1)" "$(field kea "$r" 1)")x   shardboot / dnsmasq: $(ratio "$(field shardboot "$r" 1)" "$(field dnsmasq "$r" 1)")x"
  echo "CPU cost  Kea / shardboot: $(ratio "$(field kea "$r" 2)" "$(field shardboot "$r" 2)")x   dnsmasq / shardboot: $(ratio "$(field dnsmasq "$r" 2)" "$(field shardboot "$r" 2)")x"
done
echo
echo "closed loop ($window exchanges in flight, $load_clients clients, ${secs} s each)"
printf '%-16s %10s %22s %16s %8s %11s\n' server "4-way/s" "server CPU us/exchange" "of which kernel" lost duplicates
for s in shardboot kea shardboot4; do
  read -r -a a <<< "${loop[$s]}"
  name=$s; [ "$s" = shardboot4 ] && name="shardboot DHCPv4"
  printf '%-16s %10s %22s %16s %8s %11s\n' "$name" "${a[0]}" "${a[1]}" "${a[4]}" "${a[2]}" "${a[3]}"
done
loop_field() { local a; read -r -a a <<< "${loop[$1]}"; echo "${a[$(($2 - 1))]}"; }
echo "CPU cost  Kea / shardboot: $(ratio "$(loop_field kea 2)" "$(loop_field shardboot 2)")x   DHCPv6 / DHCPv4 (shardboot): $(ratio "$(loop_field shardboot 2)" "$(loop_field shardboot4 2)")x (target at most 1.5x)"
echo
echo "shardboot's own counters (offered $rate/s):"
grep -E '_(received|sent|send_errors)_total |dropped_total.* [1-9]' "$raw/metrics-shardboot-$rate.txt" 2>/dev/null | sed 's/^/  /' || echo "  (metrics not read)"
echo "raw outputs: $raw"

row "DHCPv6 perfdhcp -6 -r $rate, 4-way exchanges/s" "$(field shardboot "$rate" 1)" "$(field kea "$rate" 1)" "Kea" higher
row "DHCPv6 perfdhcp -6 -r $rate, 4-way exchanges/s" "$(field shardboot "$rate" 1)" "$(field dnsmasq "$rate" 1)" "dnsmasq" higher
row "DHCPv6 perfdhcp -6 -r $rate, server CPU per exchange" "$(field shardboot "$rate" 2)" "$(field kea "$rate" 2)" "Kea" lower " µs"
row "DHCPv6 perfdhcp -6 -r $low, server CPU per exchange" "$(field shardboot "$low" 2)" "$(field kea "$low" 2)" "Kea" lower " µs"
row "DHCPv6 perfdhcp -6 -r $low, server CPU per exchange" "$(field shardboot "$low" 2)" "$(field dnsmasq "$low" 2)" "dnsmasq" lower " µs"
row "DHCPv6 closed loop ($window in flight), 4-way exchanges/s" "$(loop_field shardboot 1)" "$(loop_field kea 1)" "Kea" higher
row "DHCPv6 closed loop, server CPU per exchange" "$(loop_field shardboot 2)" "$(loop_field kea 2)" "Kea" lower " µs"
row "DHCPv6 closed loop, server CPU per exchange, against shardboot's DHCPv4" "$(loop_field shardboot 2)" "$(loop_field shardboot4 2)" "shardboot DHCPv4" lower " µs"
