#!/usr/bin/env bash
# The QEMU lab: one network namespace holding a bridge (one L2 provisioning segment),
# one veth per shardboot member with that member's addresses, and tap devices for VMs.
# Names inside the namespace are fixed: bridge br0, members m0, m1, ... (peers m0p, ...),
# taps tap0, tap1, ...  Shared by the integration tests, the demo and the benchmark.
#
#   qemu/lab.sh up NS TAPS ADDR/PREFIX...   e.g. qemu/lab.sh up sbdemo 1 192.0.2.1/24
#                                           (IPv6 too: fd00:1::1/64; two on m0: ADDR,ADDR)
#   qemu/lab.sh down NS                     kills every process in NS, then deletes it
#
# Run as root. Nothing outside the namespace is touched except /etc/netns/NS, which
# holds the namespace's own resolv.conf so that DHCP clients never edit the host's.
set -euo pipefail

usage() { sed -n '2,10p' "$0" >&2; exit 2; }

up() {
  local ns=$1 taps=$2; shift 2
  [ $# -ge 1 ] || usage
  ip netns add "$ns"
  mkdir -p "/etc/netns/$ns"
  echo "# shardboot lab $ns" > "/etc/netns/$ns/resolv.conf"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add br0 type bridge
  # No STP forwarding delay: a VM's first DHCP packet must not be dropped.
  ip -n "$ns" link set br0 type bridge forward_delay 0 stp_state 0
  ip -n "$ns" link set br0 up
  local i=0 addrs addr
  for addrs in "$@"; do
    ip -n "$ns" link add "m$i" type veth peer name "m${i}p"
    ip -n "$ns" link set "m${i}p" master br0
    ip -n "$ns" link set "m${i}p" up
    for addr in ${addrs//,/ }; do
      if [[ $addr == *:* ]]; then
        # IPv6: no duplicate address detection, so the address (and the link-local
        # one DHCPv6 and router advertisements leave from) is usable at once.
        ip netns exec "$ns" sysctl -qw "net.ipv6.conf.m$i.accept_dad=0"
        ip -n "$ns" addr add "$addr" dev "m$i" nodad
      else
        ip -n "$ns" addr add "$addr" dev "m$i"
      fi
    done
    ip -n "$ns" link set "m$i" up
    i=$((i + 1))
  done
  for ((i = 0; i < taps; i++)); do
    ip -n "$ns" tuntap add dev "tap$i" mode tap
    ip -n "$ns" link set "tap$i" master br0
    ip -n "$ns" link set "tap$i" up
  done
}

down() {
  local ns=$1
  if ip netns list | grep -qw "^$ns"; then
    ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns"
  fi
  rm -rf "/etc/netns/$ns"
}

case "${1:-}" in
  up) [ $# -ge 4 ] || usage; shift; up "$@" ;;
  down) [ $# -eq 2 ] || usage; down "$2" ;;
  *) usage ;;
esac
