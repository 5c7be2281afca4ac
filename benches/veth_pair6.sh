# Sourced after benches/veth_pair.sh by the DHCPv6 benches (dhcp6_vs, profile_dhcp
# FAMILY=6): the v6 side of the same veth pair (the v4 addresses stay, unused), the
# configurations of shardboot and Kea for one /64 reached through one relay, and
# start6 NAME to start one of them (or dnsmasq) on a fresh, empty lease store.
#
# Defines net6, server6, relay6, pool6 and start6.
net6=fd00:18::/64 server6=fd00:18::1 relay6=fd00:18::2
pool6="fd00:18::1:0 - fd00:18::1:ffff"      # 65,536 addresses for 50,000 clients
ip -n "$srv" addr add "$server6/64" dev "$sif" nodad
ip -n "$cli" addr add "$relay6/64" dev "$cif" nodad
# Link-local addresses do duplicate address detection first; Kea binds its server's,
# and a tentative address cannot send.
for _ in $(seq 100); do
  [ -z "$(ip -n "$srv" -6 addr show dev "$sif" tentative)$(ip -n "$cli" -6 addr show dev "$cif" tentative)" ] && break
  sleep 0.1
done

cat > "$work/shardboot6.toml" <<TOML
[dhcp]
enabled = false
# The load generator (perfdhcp -A 1, dhcp6_load) relays from \$relay6; DHCPv6 believes only the relays named here.
relays = ["$relay6"]
[ra]
enabled = false
[tftp]
enabled = false
[http]
listen = "127.0.0.1:8080"
[dhcp6]
interfaces = ["$sif"]
[[subnet6]]
network = "$net6"
ranges = ["$pool6"]
lease_time = 3600
TOML

cat > "$work/kea6.json" <<JSON
{ "Dhcp6": {
  "interfaces-config": { "interfaces": ["$sif/$server6"] },
  "multi-threading": { "enable-multi-threading": true, "thread-pool-size": 2, "packet-queue-size": 256 },
  "lease-database": { "type": "memfile", "persist": true, "name": "$work/kea-leases6.csv", "lfc-interval": 0 },
  "data-directory": "$work/kea-data",
  "preferred-lifetime": 3600, "valid-lifetime": 3600,
  "subnet6": [ { "id": 1, "subnet": "$net6", "interface": "$sif", "pools": [ { "pool": "$pool6" } ] } ],
  "loggers": [ { "name": "kea-dhcp6", "severity": "WARN", "output_options": [ { "output": "$work/kea6.log" } ] } ]
} }
JSON

# start6 NAME: NAME on a fresh, empty lease store (veth_pair.sh's start with our command).
start6() {
  rm -rf "$work/shardboot6-state" "$work/kea-leases6.csv"* "$work/kea-data" "$work/dnsmasq6.leases"
  mkdir -p "$work/kea-data"
  case $1 in
    shardboot) start shardboot "$bin" serve --config "$work/shardboot6.toml" --state-dir "$work/shardboot6-state" ;;
    kea) start kea env KEA_PIDFILE_DIR="$work" KEA_LOCKFILE_DIR=none kea-dhcp6 -c "$work/kea6.json" ;;
    dnsmasq) start dnsmasq dnsmasq --no-daemon --port=0 --bind-interfaces --interface="$sif" \
               --dhcp-range="${pool6%% *},${pool6##* },64,1h" --dhcp-lease-max=200000 \
               --dhcp-leasefile="$work/dnsmasq6.leases" --pid-file="$work/dnsmasq.pid" --quiet-dhcp6 ;;
  esac
}

