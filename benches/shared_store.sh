#!/usr/bin/env bash
# The shared lease store's cost, side by side in one run: the DHCP closed loop
# (examples/dhcp_load, a window of exchanges in flight over one relay) against
#   1. shardboot on sled alone (a single instance),
#   2. shardboot with `[store] shared` on MariaDB (one transaction per group commit),
#   3. Kea 2.2 with its MySQL lease backend on the same MariaDB server,
# each on a fresh, empty store. MariaDB runs in the server namespace, on its loopback,
# from a temporary directory (innodb_flush_log_at_trx_commit=1: every commit durable).
# Prints 4-way exchanges/s, the server's CPU per exchange and MariaDB's CPU per exchange.
# Run as root. Traffic stays inside the two namespaces made here; every run is bounded.
#
#   benches/shared_store.sh [seconds-per-server]
set -euo pipefail
# Exchange lines (target `exchange`, one per DHCP message or transfer) off, as Kea
# runs at WARN and dnsmasq without log-dhcp here: the figures compare the servers' work.
export SHARDBOOT_LOG="${SHARDBOOT_LOG:-info,exchange=warn}"
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
secs=${1:-10}
window=${WINDOW:-256}
load_clients=${LOAD_CLIENTS:-10000}

tests/install-deps.sh
cargo build --release --locked -q
cargo build --release --locked -q --example dhcp_load
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot"
load="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/dhcp_load"
tag="sbss$$"
. benches/veth_pair.sh
. benches/rows.sh

# MariaDB in the server namespace.
. benches/mariadb.sh
port=33061
start_mariadb "$srv" "$work/db" $port
on_exit "kill $db_pid; wait $db_pid"
db_sql "CREATE DATABASE kea; GRANT ALL ON kea.* TO 'sb'@'%';"
mariadb --no-defaults -S "$db/sock" -uroot kea < /usr/share/kea/scripts/mysql/dhcpdb_create.mysql

cp "$work/shardboot.toml" "$work/shardboot-shared.toml"
cat >> "$work/shardboot-shared.toml" <<TOML
[store]
shared = "mysql://sb:sbpass@127.0.0.1:$port/sb"
TOML
sed 's|"lease-database": {[^}]*}|"lease-database": { "type": "mysql", "name": "kea", "host": "127.0.0.1", "port": '$port', "user": "sb", "password": "sbpass" }|' \
  "$work/kea.json" > "$work/kea-mysql.json"

# Prints "<4-way/s> <server CPU µs/exchange> <MariaDB CPU µs/exchange> <lost> <duplicates>".
measure() {
  local out b a db_b db_a n rate lost dups
  b=$(cpu_ticks "$server_pid"); db_b=$(cpu_ticks "$db_pid")
  out=$(timeout $((secs + 30)) ip netns exec "$cli" "$load" --relay 198.18.0.2 --server 198.18.0.1 --seconds "$secs" \
        --window "$window" --clients "$load_clients" 2>&1 || true)
  a=$(cpu_ticks "$server_pid"); db_a=$(cpu_ticks "$db_pid")
  echo "$out" > "$work/load-$1.txt"
  read -r _ n _ rate _ lost _ _ _ dups _ <<< "$(echo "$out" | grep '^exchanges' || echo "exchanges 0 rate n/a lost n/a naks n/a duplicates n/a")"
  per() { awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="${n:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }'; }
  echo "${rate%/s} $(per $((a - b))) $(per $((db_a - db_b))) $lost $dups"
}

start shardboot
read -r r1 c1 d1 l1 u1 <<< "$(measure sled)"; stop
rm -rf "$work/shardboot-state"
start shardboot-shared "$bin" serve --config "$work/shardboot-shared.toml" --state-dir "$work/shardboot-state"
read -r r2 c2 d2 l2 u2 <<< "$(measure shared)"; stop
start kea-mysql env KEA_PIDFILE_DIR="$work" KEA_LOCKFILE_DIR=none kea-dhcp4 -c "$work/kea-mysql.json"
read -r r3 c3 d3 l3 u3 <<< "$(measure kea)"; stop

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "n/a" }'; }
echo
echo "closed loop (examples/dhcp_load, $window exchanges in flight, $load_clients clients, ${secs} s each), $(nproc) cores"
printf '%-24s %10s %16s %18s %6s %6s\n' server "4-way/s" "server µs/exch" "MariaDB µs/exch" lost dups
printf '%-24s %10s %16s %18s %6s %6s\n' "shardboot, sled" "$r1" "$c1" "$d1" "$l1" "$u1" \
  "shardboot, MariaDB" "$r2" "$c2" "$d2" "$l2" "$u2" "Kea 2.2, MySQL backend" "$r3" "$c3" "$d3" "$l3" "$u3"
echo "rate  shared store / Kea MySQL: $(ratio "$r2" "$r3")x   shared store / sled: $(ratio "$r2" "$r1")x"
row "shared store (MariaDB) closed loop, 4-way exchanges/s" "$r2" "$r3" "Kea, MySQL backend" higher
row "shared store (MariaDB) closed loop, server CPU per exchange" "$c2" "$c3" "Kea, MySQL backend" lower " µs"
row "shared store (MariaDB) closed loop, 4-way exchanges/s" "$r2" "$r1" "shardboot on sled alone" higher
