#!/usr/bin/env bash
# Three members against one, in one run: perfdhcp broadcasting on a bridge (like a rack
# of PXE ROMs) to a single shardboot serving the whole range, then to three members that
# each answer only their own machines from their own share and agree through the shared
# lease store (MariaDB in the server namespace, every commit durable), which decides
# every lease before its ACK. Prints 4-way exchanges/s, the members' summed CPU per
# exchange, perfdhcp's REQUEST-ACK delay, p50/p99 of the local commit and of the shared
# store's round trip (from the members' histograms; an ACK waits for the later of the
# two), and how many addresses are held for two clients across the stores (must be 0).
# Run as root.
#
#   benches/dhcp_members.sh [seconds] [perfdhcp-rate]
#
# THREADS=1 also prints each thread's CPU per exchange, summed over the members (where
# the shared store's cost goes); PERF_OUT=<file> does that and records `perf record -g` over
# the three members' run.
#
# Traffic stays inside the namespaces made here; every run is bounded by perfdhcp -p.
set -euo pipefail
# Exchange lines (target `exchange`, one per DHCP message or transfer) off, as Kea
# runs at WARN and dnsmasq without log-dhcp here: the figures compare the servers' work.
export SHARDBOOT_LOG="${SHARDBOOT_LOG:-info,exchange=warn}"
cd "$(dirname "$0")/.."
. benches/rows.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
secs=${1:-10}
rate=${2:-4000}
clients=50000

command -v perfdhcp >/dev/null || tests/install-deps.sh
cargo build --release --locked -q
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot"

tag="sbm$$"
srv="$tag-s"; cli="$tag-c"; br="${tag}br"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "${pids_db:-}" 2>/dev/null || true
  wait 2>/dev/null || true
  ip netns del "$srv" 2>/dev/null || true
  ip netns del "$cli" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$srv"; ip netns add "$cli"
for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
ip -n "$srv" link add "$br" type bridge; ip -n "$srv" link set "$br" up
ifs=()
for i in 0 1 2; do
  m="${tag}m$i"; p="${tag}p$i"
  ip link add "$m" type veth peer name "$p"
  ip link set "$m" netns "$srv"; ip link set "$p" netns "$srv"
  ip -n "$srv" link set "$p" master "$br"; ip -n "$srv" link set "$p" up
  ip -n "$srv" addr add "198.18.0.1$((i + 1))/16" dev "$m"; ip -n "$srv" link set "$m" up
  ifs+=("$m")
done
c="${tag}c"; p="${tag}pc"
ip link add "$c" type veth peer name "$p"
ip link set "$c" netns "$cli"; ip link set "$p" netns "$srv"
ip -n "$srv" link set "$p" master "$br"; ip -n "$srv" link set "$p" up
ip -n "$cli" addr add 198.18.0.2/16 dev "$c"; ip -n "$cli" link set "$c" up

# The members' shared lease store: MariaDB on the server namespace's loopback.
. benches/mariadb.sh
port=33062
start_mariadb "$srv" "$work/db" $port
pids_db=$db_pid

config() { # index, member-count
  local i=$1 n=$2 names=(a b c)
  cat <<EOF
[dhcp]
interfaces = ["${ifs[$i]}"]
relays = ["198.18.0.0/16"]
[tftp]
enabled = false
[http]
listen = "198.18.0.1$((i + 1)):8080"
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.255.254"]
lease_time = 3600
EOF
  if [ "$n" -gt 1 ]; then
    printf '[store]\nshared = "mysql://sb:sbpass@127.0.0.1:%s/sb"\nheartbeat_secs = 1\n' "$port"
    printf '[owner]\nself = "%s"\n' "${names[$i]}"
    for k in $(seq 0 $((n - 1))); do
      printf '[[member]]\nname = "%s"\nhttp_url = "http://198.18.0.1%d:8080"\n' "${names[$k]}" $((k + 1))
    done
  fi
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Each thread name's user+system ticks, summed over the given processes (sled-io-N
# threads under one name).
thread_ticks() {
  local p t
  for p in "$@"; do
    for t in /proc/"$p"/task/*; do
      printf '%s %s\n' "$(tr ' ' '_' < "$t/comm" | sed 's/-[0-9]*$//')" "$(awk '{print $14 + $15}' "$t/stat")"
    done
  done | awk '{ s[$1] += $2 } END { for (n in s) print n, s[n] }' | sort
}
run() { # member-count → "<4-way/s> <CPU us/exchange> <duplicates>"
  local n=$1 out before=0 after=0 acks
  pids=()
  for i in $(seq 0 $((n - 1))); do
    config "$i" "$n" >"$work/m$i-$n.toml"
    ip netns exec "$srv" "$bin" serve --config "$work/m$i-$n.toml" --state-dir "$work/state-$n-$i" \
      >"$work/m$i-$n.log" 2>&1 &
    pids+=($!)
  done
  sleep 2
  for p in "${pids[@]}"; do before=$((before + $(cpu_ticks "$p"))); done
  local perf_pid="" threads_before=""
  local split=${THREADS:-}
  [ -z "${PERF_OUT:-}" ] || split=1
  [ -z "$split" ] || threads_before=$(thread_ticks "${pids[@]}")
  if [ -n "${PERF_OUT:-}" ] && [ "$n" -gt 1 ]; then
    perf record -q -g -F 999 -p "$(IFS=,; echo "${pids[*]}")" -o "$PERF_OUT" -- sleep "$secs" 2>/dev/null &
    perf_pid=$!
  fi
  out=$(cd "$work" && ip netns exec "$cli" perfdhcp -4 -r "$rate" -R "$clients" -p "$secs" -W 1000000 -l "$c" 2>&1 || true)
  for p in "${pids[@]}"; do after=$((after + $(cpu_ticks "$p"))); done
  [ -z "$perf_pid" ] || wait "$perf_pid" || true
  if [ -n "$split" ]; then
    local n_acks
    n_acks=$(echo "$out" | awk '/REQUEST-ACK/ {f=1} f && /received packets/ {print $3; exit}')
    echo "CPU per exchange by thread, summed over the $n members:" >&2
    join <(echo "$threads_before") <(thread_ticks "${pids[@]}") | awk -v n="${n_acks:-1}" -v hz="$(getconf CLK_TCK)" '
      { d = $3 - $2; if (d > 0) printf "  %-20s %7.1f us\n", $1, d / hz * 1e6 / n }' >&2
  fi
  # Every member's histograms, summed (the shared store's only with n > 1).
  local metrics=""
  for i in $(seq 0 $((n - 1))); do
    metrics+=$(ip netns exec "$srv" curl -s --max-time 2 "http://198.18.0.1$((i + 1)):8080/metrics" || true)
    metrics+=$'\n'
  done
  echo "$metrics" >"$work/metrics-$n.txt"
  for p in "${pids[@]}"; do kill "$p"; done
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
  echo "$out" >"$work/perfdhcp-$n.txt"
  [ -n "${SB_BENCH_DEBUG:-}" ] && { echo "$out" | tail -30; tail -5 "$work"/m*-"$n".log; } >&2
  acks=$(echo "$out" | awk '/REQUEST-ACK/ {f=1} f && /received packets/ {print $3; exit}')
  # Every lease of every member's store, duplicates counted across stores.
  local dups=0
  # Every store holds every lease (followed from the shared store): an address counts
  # when the stores hold it for two different clients.
  dups=$(for i in $(seq 0 $((n - 1))); do
      "$bin" leases --json --config "$work/m$i-$n.toml" --state-dir "$work/state-$n-$i" \
        | python3 -c 'import json,sys; [print(l["ip"], l["mac"]) for l in json.load(sys.stdin) if l["state"] == "bound"]'
    done | sort -u | awk '{print $1}' | uniq -d | wc -l)
  # perfdhcp's REQUEST-ACK delays (ms): average and maximum.
  local delay
  delay=$(echo "$out" | awk '/REQUEST-ACK/ {f=1} f && /avg delay/ {a=$3} f && /max delay/ {m=$3; print a "/" m; exit}')
  # p50 and p99 of a histogram, from the members' summed buckets.
  quantiles() {
    grep "^$1_bucket" "$work/metrics-$n.txt" 2>/dev/null | sed 's/.*le="\([^"]*\)"} \(.*\)/\1 \2/' \
      | awk '{c[$1] += $2; if (!($1 in seen)) {seen[$1] = 1; order[++k] = $1}}
        END { t = c["+Inf"]; if (!t) { print "n/a"; exit }
              for (i = 1; i <= k; i++) { b = order[i]; if (!p50 && c[b] >= t * 0.5) p50 = b; if (!p99 && c[b] >= t * 0.99) p99 = b }
              printf "<=%gms/<=%gms", p50 * 1000, p99 * 1000 }'
  }
  local commit rtt
  commit=$(quantiles shardboot_lease_commit_seconds)
  rtt=$(quantiles shardboot_shared_store_seconds)
  echo "$(echo "$out" | awk '/^Rate:/ {print $2; exit}') $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="${acks:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }') $dups ${delay:-n/a} ${commit:-n/a} ${rtt:-n/a}"
}

read -r r1 c1 d1 a1 k1 q1 <<<"$(run 1)"
read -r r3 c3 d3 a3 k3 q3 <<<"$(run 3)"
echo
echo "perfdhcp -r $rate -R $clients -p $secs, broadcast on one bridge, $(nproc) cores"
printf '%-26s %10s %26s %12s %22s %22s %24s\n' setup "4-way/s" "members' CPU us/exchange" duplicates "REQ-ACK avg/max ms" "commit p50/p99" "shared store p50/p99"
printf '%-26s %10s %26s %12s %22s %22s %24s\n' "1 member" "$r1" "$c1" "$d1" "$a1" "$k1" "$q1" "3 members (shared store)" "$r3" "$c3" "$d3" "$a3" "$k3" "$q3"
awk -v a="$r3" -v b="$r1" 'BEGIN { if (b > 0) printf "3 members / 1 member: %.2fx\n", a / b }'
row "three members on the shared store, summed CPU per exchange" "$c3" "$c1" "one member" lower " µs"
