# Sourced by the DHCP benches that compare servers over one relay (dhcp_vs, boot_storm):
# a veth pair between a server namespace (198.18.0.1) and a client namespace
# (198.18.0.2, where the load generator acts as the relay agent), the three servers'
# configurations for the same /16, and starting and stopping one server at a time.
# Everything is removed on exit (also the host setting a bench changed, via
# `on_exit`). Traffic stays inside the two namespaces.
#
# Before sourcing: `tag` (a short unique prefix). Defines srv, cli, sif, cif, work,
# server_pid, start NAME [COMMAND…], stop, cpu_ticks PID, sys_ticks PID, on_exit COMMAND,
# closed_loop OUTPUT LOAD….

srv="$tag-s"; cli="$tag-c"; sif="${tag}s"; cif="${tag}c"
# Exchange lines (target `exchange`, one per DHCP message) off, as Kea runs at WARN and
# dnsmasq without log-dhcp here: the figures compare the servers' work.
export SHARDBOOT_LOG="${SHARDBOOT_LOG:-info,exchange=warn}"
work=$(mktemp -d)
server_pid=
exit_hooks=()
on_exit() { exit_hooks+=("$*"); }
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  local h
  for h in "${exit_hooks[@]}"; do eval "$h" || true; done
  ip netns del "$srv" 2>/dev/null || true
  ip netns del "$cli" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$srv"; ip netns add "$cli"
ip link add "$sif" type veth peer name "$cif"
ip link set "$sif" netns "$srv"; ip link set "$cif" netns "$cli"
ip -n "$srv" addr add 198.18.0.1/16 dev "$sif"; ip -n "$cli" addr add 198.18.0.2/16 dev "$cif"
for ns in "$srv" "$cli"; do ip -n "$ns" link set lo up; done
ip -n "$srv" link set "$sif" up; ip -n "$cli" link set "$cif" up

# conflict_probe_ms = 0: dnsmasq runs with --no-ping and Kea does not probe.
cat > "$work/shardboot.toml" <<TOML
[dhcp]
interfaces = ["$sif"]
relays = ["198.18.0.0/16"]
conflict_probe_ms = 0
[tftp]
enabled = false
[[subnet]]
network = "198.18.0.0/16"
ranges = ["198.18.1.0 - 198.18.255.254"]
lease_time = 3600
router = "198.18.0.1"
TOML

cat > "$work/kea.json" <<JSON
{ "Dhcp4": {
  "interfaces-config": { "interfaces": ["$sif"], "dhcp-socket-type": "udp" },
  "multi-threading": { "enable-multi-threading": true, "thread-pool-size": 2, "packet-queue-size": 256 },
  "lease-database": { "type": "memfile", "persist": true, "name": "$work/kea-leases.csv", "lfc-interval": 0 },
  "valid-lifetime": 3600,
  "subnet4": [ { "id": 1, "subnet": "198.18.0.0/16", "pools": [ { "pool": "198.18.1.0 - 198.18.255.254" } ],
                 "option-data": [ { "name": "routers", "data": "198.18.0.1" } ] } ],
  "loggers": [ { "name": "kea-dhcp4", "severity": "WARN", "output_options": [ { "output": "$work/kea.log" } ] } ]
} }
JSON

# start NAME [COMMAND…]: NAME is shardboot, dnsmasq or kea (each on a fresh, empty
# lease store), or any name with the COMMAND to run.
start() {
  local name=$1; shift
  if [ $# -eq 0 ]; then
    rm -rf "$work/shardboot-state" "$work/kea-leases.csv"* "$work/dnsmasq.leases"
    case $name in
      shardboot) set -- "$bin" serve --config "$work/shardboot.toml" --state-dir "$work/shardboot-state" ;;
      # --no-ping: dnsmasq otherwise pings each address first.
      dnsmasq) set -- dnsmasq --no-daemon --port=0 --no-ping --bind-interfaces --interface="$sif" \
                 --dhcp-range=198.18.1.0,198.18.255.254,255.255.0.0,1h --dhcp-lease-max=200000 \
                 --dhcp-authoritative --dhcp-leasefile="$work/dnsmasq.leases" --pid-file="$work/dnsmasq.pid" --quiet-dhcp ;;
      kea) set -- env KEA_PIDFILE_DIR="$work" KEA_LOCKFILE_DIR=none kea-dhcp4 -c "$work/kea.json" ;;
      *) echo "start: no command for $name" >&2; exit 2 ;;
    esac
  fi
  ip netns exec "$srv" "$@" > "$work/$name.log" 2>&1 &
  server_pid=$!
  sleep 1.5
  kill -0 "$server_pid" 2>/dev/null || { echo "$name failed to start:"; cat "$work/$name.log"; exit 1; }
}
stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The kernel's part of it (system time): on veth it includes the receiving side's
# softirq work, which runs in the sender's context.
sys_ticks() { awk '{print $15}' "/proc/$1/stat"; }

# closed_loop OUTPUT LOAD…: a closed-loop generator (examples/dhcp_load or dhcp6_load,
# with its --relay and --server) against the running server, in the client namespace,
# for $secs seconds with $window exchanges in flight over $load_clients clients, so the
# server, not the generator, sets the pace. The generator's output goes to OUTPUT.
# Prints "<4-way/s> <server CPU µs per exchange> <lost> <duplicates> <of which kernel
# µs>".
closed_loop() {
  local output=$1 out before after sys_before sys_after n rate lost dups
  shift
  before=$(cpu_ticks "$server_pid"); sys_before=$(sys_ticks "$server_pid")
  out=$(timeout $((secs + 30)) ip netns exec "$cli" "$@" --seconds "$secs" \
        --window "$window" --clients "$load_clients" 2>&1 || true)
  after=$(cpu_ticks "$server_pid"); sys_after=$(sys_ticks "$server_pid")
  echo "$out" > "$output"
  # Both generators print "exchanges N rate R/s lost L <naks|refused> K duplicates D ...".
  read -r _ n _ rate _ lost _ _ _ dups _ <<< "$(echo "$out" | grep '^exchanges' || echo "exchanges 0 rate n/a lost n/a naks n/a duplicates n/a")"
  echo "${rate%/s}" \
       "$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="${n:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }')" \
       "$lost" "$dups" \
       "$(awk -v t=$((sys_after - sys_before)) -v hz="$(getconf CLK_TCK)" -v n="${n:-0}" 'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }')"
}
