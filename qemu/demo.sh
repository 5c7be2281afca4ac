#!/usr/bin/env bash
# One-command demo: build shardboot, make a two-namespace lab (server 192.0.2.1 on one
# side of a veth pair, a client on the other), run shardboot on its built-in default
# config, let a real DHCP client (ISC dhclient) obtain a lease, and print the lease table.
# Everything it creates is removed on exit. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
[ "$(id -u)" = 0 ] || { echo "qemu/demo.sh: run as root (network namespaces, port 67)" >&2; exit 1; }
command -v dhclient >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq isc-dhcp-client iproute2 >/dev/null; }

echo "== building shardboot (release)"
cargo build --release --locked -q
bin="$PWD/target/release/shardboot"

tag="sbdemo$$"
srv="$tag-srv"; cli="$tag-cli"
work=$(mktemp -d)
cleanup() {
  [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  ip netns pids "$cli" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip netns del "$srv" 2>/dev/null || true
  ip netns del "$cli" 2>/dev/null || true
  rm -rf "/etc/netns/$srv" "/etc/netns/$cli" "$work"
}
trap cleanup EXIT

echo "== lab: namespaces $srv (192.0.2.1/24) and $cli, joined by a veth pair"
for ns in "$srv" "$cli"; do
  ip netns add "$ns"
  # Keep DHCP clients away from the host's resolv.conf.
  mkdir -p "/etc/netns/$ns" && echo "# demo" > "/etc/netns/$ns/resolv.conf"
  ip -n "$ns" link set lo up
done
ip link add "${tag}s" type veth peer name "${tag}c"
ip link set "${tag}s" netns "$srv"
ip link set "${tag}c" netns "$cli"
ip -n "$srv" addr add 192.0.2.1/24 dev "${tag}s"
ip -n "$srv" link set "${tag}s" up
ip -n "$cli" link set "${tag}c" up

echo "== shardboot serve (built-in default config, state in $work/state)"
ip netns exec "$srv" "$bin" serve --state-dir "$work/state" 2> "$work/shardboot.log" &
server_pid=$!
for _ in $(seq 50); do grep -q "DHCP listening" "$work/shardboot.log" && break; sleep 0.1; done
sed 's/^/   | /' "$work/shardboot.log"

echo "== dhclient in $cli"
cat > "$work/hook" <<'HOOK'
#!/bin/sh
case "$reason" in BOUND|RENEW|REBOOT)
  ip addr replace "$new_ip_address/$new_subnet_mask" dev "$interface"
  echo "   | $reason: $new_ip_address/$new_subnet_mask router $new_routers dns $new_domain_name_servers domain $new_domain_name lease ${new_dhcp_lease_time}s from $new_dhcp_server_identifier" ;;
esac
HOOK
chmod +x "$work/hook"
ip netns exec "$cli" timeout 30 dhclient -4 -1 -sf "$work/hook" -lf "$work/dhclient.leases" -pf "$work/dhclient.pid" "${tag}c"
ip netns exec "$cli" dhclient -x -sf "$work/hook" -lf "$work/dhclient.leases" -pf "$work/dhclient.pid" "${tag}c" 2>/dev/null || true

echo "== stopping shardboot; lease table from its store"
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
"$bin" leases --state-dir "$work/state"
