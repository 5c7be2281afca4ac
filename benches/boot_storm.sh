#!/usr/bin/env bash
# A rack powering on, side by side in one run: how long until the last machine is bound,
# and how many packets had to be sent again, for shardboot, Kea and dnsmasq, each serving
# the same /16 through one relay on a veth pair between two namespaces. Run as root.
#
#   benches/boot_storm.sh [limit-seconds-per-run]     (SERVERS="shardboot kea" for fewer)
#
# Two generators, each at 5,000 and 20,000 machines, every run on a fresh server:
# - perfdhcp --scenario avalanche: every client DISCOVERs at once, then perfdhcp's own
#   back-off (1 s, 2 s, 4 s … each randomised by ±1 s, so a reply slower than the random
#   draw is sent again even from a server that keeps up);
# - examples/boot_storm: PXE firmware then iPXE per machine (two leases' work), 20 % of
#   the machines renewing into the storm, RFC 2131 §4.1 back-off (4 s ±1 s, doubling).
# Kernel drops at each server's socket are read from /proc/net/udp after each run.
#
# perfdhcp's socket takes net.core.rmem_default (208 KiB here), which drops most of a
# storm's replies before perfdhcp reads them: the script raises it to 32 MiB for the run
# (for every server alike) and puts the old value back on exit.
# Traffic stays inside the two namespaces made here; every run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/rows.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
limit=${1:-60}

tests/install-deps.sh
cargo build --release --locked -q
cargo build --release --locked -q --example boot_storm
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot"
storm="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/boot_storm"

tag="sbst$$"
. benches/veth_pair.sh
# Raw outputs kept for a closer look (perfdhcp's report, boot_storm's line).
raw="$PWD/target/boot_storm"
rm -rf "$raw"; mkdir -p "$raw"
old_rmem=$(sysctl -n net.core.rmem_default)
on_exit sysctl -qw net.core.rmem_default="$old_rmem"
sysctl -qw net.core.rmem_default=33554432

# Datagrams the kernel dropped at the server's port-67 socket (0x0043).
server_drops() { ip netns exec "$srv" awk '$2 ~ /:0043$/ {d += $NF} END {print d + 0}' /proc/net/udp; }
cpu_ms() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", t / hz * 1000 }'; }

# run_avalanche N → "<seconds or -> <resent> <server drops> <server CPU ms>"
run_avalanche() {
  local n=$1 out before after took resent
  before=$(cpu_ticks "$server_pid")
  out=$(cd "$work" && timeout "$limit" ip netns exec "$cli" perfdhcp -4 --scenario avalanche -R "$n" \
        -l 198.18.0.2 198.18.0.1 2>&1 || true)
  after=$(cpu_ticks "$server_pid")
  echo "$out" > "$raw/avalanche-$n-$2.txt"
  # "It took 00:00:02.407032 to provision 20000 clients."
  took=$(echo "$out" | awk '/^It took/ { split($3, t, ":"); printf "%.2f", t[1] * 3600 + t[2] * 60 + t[3] }')
  resent=$(echo "$out" | awk '/^Requests resent:/ {print $3}')
  echo "${took:--} ${resent:--} $(server_drops) $(cpu_ms $((after - before)))"
}

# run_storm N → "<seconds or -> <retransmissions> <server drops> <server CPU ms> <bound> <duplicates>"
run_storm() {
  local n=$1 out before after
  before=$(cpu_ticks "$server_pid")
  out=$(timeout $((limit + 70)) ip netns exec "$cli" "$storm" --relay 198.18.0.2 --server 198.18.0.1 \
        --machines "$n" --limit-secs "$limit" 2>&1 || true)
  after=$(cpu_ticks "$server_pid")
  echo "$out" > "$raw/storm-$n-$2.txt"
  # "machines N renewing R bound B last Xs p50 … retransmissions T naks K duplicates D …"
  echo "$out" | awk -v drops="$(server_drops)" -v cpu="$(cpu_ms $((after - before)))" '/^machines/ {
    last = $8; sub(/s$/, "", last); if ($6 != $2) last = "-";
    printf "%s %s %s %s %s %s\n", last, $16, drops, cpu, $6, $20; found = 1 }
    END { if (!found) print "- - - - 0 -" }'
}

declare -A result
for server in ${SERVERS:-shardboot kea dnsmasq}; do
  for n in 5000 20000; do
    start "$server"; result[$server,avalanche,$n]=$(run_avalanche "$n" "$server"); stop
    start "$server"; result[$server,storm,$n]=$(run_storm "$n" "$server"); stop
  done
done

field() { echo "${result[$1]:-- - - - 0 -}" | awk -v i="$2" '{print $i}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b != "-" && a > 0) printf "%.1f×", b / a; else print "n/a" }'; }
cell() { # KEY → "1.23 s, 45 resent, 0 dropped, 310 ms CPU"
  local s; s=$(field "$1" 1)
  if [ -z "${result[$1]:-}" ]; then
    echo "not run"
  elif [ "$s" = - ]; then
    case $1 in *storm*) echo "not done in ${limit} s ($(field "$1" 5) bound)" ;; *) echo "not done in ${limit} s" ;; esac
  else
    echo "$s s, $(field "$1" 2) resent, $(field "$1" 3) dropped, $(field "$1" 4) ms CPU"
  fi
}
echo
echo "Boot storm, relayed over veth, $(nproc) cores, each run on a fresh server (limit ${limit} s)"
echo
echo "| time until the last machine is bound | shardboot | Kea 2.2 MT, memfile | dnsmasq | Kea / shardboot |"
echo "|---|---|---|---|---|"
for n in 5000 20000; do
  for kind in avalanche storm; do
    case $kind in
      avalanche) label="perfdhcp avalanche, $n clients" ;;
      storm) label="boot_storm, $n machines (PXE + iPXE, 20 % renewing)" ;;
    esac
    echo "| $label | $(cell "shardboot,$kind,$n") | $(cell "kea,$kind,$n") | $(cell "dnsmasq,$kind,$n") | $(ratio "$(field "shardboot,$kind,$n" 1)" "$(field "kea,$kind,$n" 1)") |"
  done
done
for n in 5000 20000; do
  row "boot storm, $n machines (boot_storm), s until the last is bound" "$(field "shardboot,storm,$n" 1)" "$(field "kea,storm,$n" 1)" "Kea" lower " s"
  row "boot storm, $n clients (perfdhcp avalanche), s until the last is bound" "$(field "shardboot,avalanche,$n" 1)" "$(field "kea,avalanche,$n" 1)" "Kea" lower " s"
done
dups=$(for k in "${!result[@]}"; do case $k in *storm*) field "$k" 6 ;; esac; done | awk '$1 != "-" {s += $1} END {print s + 0}')
echo
echo "addresses ACKed to two machines in the boot_storm runs (all servers): $dups"
echo "each run's output: $raw"
