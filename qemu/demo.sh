#!/usr/bin/env bash
# One-command demo: build shardboot, make a QEMU lab (qemu/lab.sh: a namespace with a
# bridge, the server address 192.0.2.1 and a tap), run shardboot on its built-in default
# config, and network-boot a real machine (qemu/vm.sh: SeaBIOS and the iPXE ROM of its
# NIC; FIRMWARE=uefi-pxe or uefi-http for OVMF) through shardboot's DHCP and boot script
# to the per-node config of a demo conductor, which prints "booted via shardboot" on the
# machine's console. Prints the console and then the lease table. Everything it creates
# is removed on exit. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
[ "$(id -u)" = 0 ] || { echo "qemu/demo.sh: run as root (network namespaces, port 67)" >&2; exit 1; }
firmware=${FIRMWARE:-bios-ipxe}
mac=52:54:00:de:00:01
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -e /usr/lib/ipxe/qemu/efi-virtio.rom ] || need+=(ipxe-qemu)
[ -e /usr/lib/ipxe/snponly.efi ] || need+=(ipxe)
[ -e /usr/share/OVMF/OVMF_CODE_4M.fd ] || need+=(ovmf)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "== building shardboot (release)"
cargo build --release --locked -q
bin="$PWD/target/release/shardboot"

ns="sbdemo$$"
work=$(mktemp -d)
cleanup() {
  qemu/lab.sh down "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== lab: namespace $ns, bridge br0, shardboot on m0 (192.0.2.1/24), the machine on tap0"
qemu/lab.sh up "$ns" 1 192.0.2.1/24

# The conductor's side, which shardboot chains each machine to: Ironic would serve
# <conductor>/pxelinux.cfg/<mac>; here a static file does.
mkdir -p "$work/conductor/pxelinux.cfg"
cat > "$work/conductor/pxelinux.cfg/${mac//:/-}" <<'IPXE'
#!ipxe
echo booted via shardboot: ${net0/mac} has ${net0/ip} from DHCP server ${dhcp-server}
poweroff || sleep 600
IPXE
# (A subshell, so that the lab's clean-up kill is not reported as a job.)
(ip netns exec "$ns" python3 -m http.server --bind 192.0.2.1 --directory "$work/conductor" 8088 \
  >/dev/null 2>&1 &)

echo "== shardboot serve: built-in default config; the demo conductor is its one member's"
ip netns exec "$ns" "$bin" serve --state-dir "$work/state" \
  --set owner.self=demo \
  --set 'member=[{ name = "demo", http_url = "http://192.0.2.1:8080", conductor_url = "http://192.0.2.1:8088" }]' \
  2> "$work/shardboot.log" &
server_pid=$!
for _ in $(seq 100); do grep -q "DHCP listening" "$work/shardboot.log" && break; sleep 0.1; done
sed 's/^/   | /' "$work/shardboot.log"

echo "== network-booting a QEMU machine ($firmware, NIC $mac; software emulation: about 6 s for bios-ipxe, 15 s for OVMF)"
console="$work/console.log"
ip netns exec "$ns" qemu/vm.sh "$firmware" tap0 "$mac" "$console" 2> "$work/qemu.log" &
vm_pid=$!
# The serial console without terminal control sequences (sgabios draws one character
# at a time).
plain() { sed -e 's/\x1b\[[0-9;?]*[@-~]//g' -e 's/\r//g' "$console" 2>/dev/null | grep -av '^\s*$' || true; }
ok=
for _ in $(seq 240); do
  plain | grep -aq "booted via shardboot" && { ok=1; break; }
  kill -0 "$vm_pid" 2>/dev/null || break
  sleep 0.5
done
echo "== the machine's console"
plain | grep -a "iPXE\|DHCP\|net0\|http\|/v1/\|tftp\|shardboot\|Booting\|PXE" | tail -20 | sed 's/^/   | /'
kill "$vm_pid" 2>/dev/null || true
wait "$vm_pid" 2>/dev/null || true

echo "== stopping shardboot; lease table from its store"
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
"$bin" leases --state-dir "$work/state"
if [ -z "$ok" ]; then
  echo "qemu/demo.sh: the machine did not reach its per-node config; shardboot's log:" >&2
  sed 's/^/   | /' "$work/shardboot.log" >&2
  exit 1
fi
echo "== done: the machine booted via shardboot"
