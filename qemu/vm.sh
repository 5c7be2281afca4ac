#!/usr/bin/env bash
# Launches one QEMU machine that network-boots from tap device TAP, with its serial
# console written to CONSOLE. Run it inside the lab namespace (qemu/lab.sh):
#
#   ip netns exec NS qemu/vm.sh FIRMWARE TAP MAC CONSOLE [OTHER_MAC...]
#
# Each OTHER_MAC is one more NIC, connected to nothing, placed before the booting NIC in
# PCI order: iPXE then numbers them net0, net1, ... and the booting NIC (MAC, on TAP,
# first in the boot order) comes last, like a server whose provisioning NIC is not net0.
#
# FIRMWARE is one of
#   bios-ipxe   SeaBIOS, then the iPXE option ROM of the virtio NIC (Debian's ipxe-qemu);
#               sgabios copies the screen to the serial console
#   uefi-pxe    OVMF's own PXE (empty NIC romfile): DHCP PXEClient:Arch:00007, TFTP
#               snponly.efi, then iPXE
#   uefi-http   OVMF's UEFI HTTP Boot: IPv4 PXE and IPv6 switched off through fw_cfg
#               (OvmfPkg's runtime options), so the first DHCP is HTTPClient:Arch:00016
#               and the boot file is a URL
#   uefi-pxe6   OVMF's PXE over IPv6 first (IPv4 off): DHCPv6 Solicit
#               PXEClient:Arch:00007, option 59 tftp://[addr]/snponly.efi
#   uefi-http6  OVMF's UEFI HTTP Boot over IPv6 (IPv4 and PXEv6 off): DHCPv6 Solicit
#               HTTPClient:Arch:00016, option 59 http://[addr]:port/…
#   uefi-pxe-sb uefi-pxe with Secure Boot on: OVMF_CODE_4M.secboot.fd (SMM) and the
#               variable store template $OVMF_VARS (default Debian's
#               OVMF_VARS_4M.snakeoil.fd: Secure Boot on, the snakeoil key in PK, KEK
#               and db); the firmware starts only a boot file signed by a key in db
#
# Software emulation (TCG: KVM is not dependable on the lab machines), 256 MiB, no
# reboot: the machine stops when the guest resets or powers off. The process is
# replaced by QEMU (exec), so the caller's PID is QEMU's and killing it stops the VM;
# `qemu/lab.sh down` kills whatever is left in the namespace.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,31p' "$0" >&2; exit 2; }
firmware=$1 tap=$2 mac=$3 console=$4
shift 4
# The NICs that come first: no netdev (QEMU warns that they have no peer).
others=()
boot_nic=""
for m in "$@"; do
  others+=(-device "virtio-net-pci,mac=$m,romfile=")
  boot_nic=",bootindex=1"
done

# The SMBIOS UUID (DHCP option 97) is made from the MAC.
common=(-accel tcg -m 256 -display none -no-reboot -monitor none
  -uuid "5b0e7a11-c0de-4b1d-8000-${mac//:/}"
  -serial "file:$console"
  -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no")

# ovmf [CODE VARS_TEMPLATE MACHINE]
ovmf() {
  local code=${1:-/usr/share/OVMF/OVMF_CODE_4M.fd}
  local template=${2:-/usr/share/OVMF/OVMF_VARS_4M.fd}
  # Each machine gets its own writable copy of the UEFI variable store.
  local vars="${console%.log}.vars.fd"
  cp "$template" "$vars"
  echo -machine "${3:-q35}" \
    -drive "if=pflash,format=raw,readonly=on,file=$code" \
    -drive "if=pflash,format=raw,file=$vars"
}

case "$firmware" in
  bios-ipxe)
    args=(-boot n -device sga "${others[@]}" -device "virtio-net-pci,netdev=n0,mac=$mac$boot_nic") ;;
  uefi-pxe)
    # shellcheck disable=SC2207
    args=($(ovmf) "${others[@]}" -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=$boot_nic") ;;
  uefi-pxe-sb)
    # The secboot build keeps the variable store behind SMM, so that only the firmware
    # can write db: it needs SMM and a flash that only SMM may write, or it stops at
    # start (README.Debian of the ovmf package).
    # shellcheck disable=SC2207
    args=($(ovmf /usr/share/OVMF/OVMF_CODE_4M.secboot.fd \
      "${OVMF_VARS:-/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd}" q35,smm=on)
      -global driver=cfi.pflash01,property=secure,value=on
      "${others[@]}" -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=$boot_nic") ;;
  uefi-http)
    # shellcheck disable=SC2207
    args=($(ovmf) -device "virtio-net-pci,netdev=n0,mac=$mac,romfile="
      -fw_cfg name=opt/org.tianocore/IPv4PXESupport,string=no
      -fw_cfg name=opt/org.tianocore/IPv6Support,string=no) ;;
  uefi-pxe6 | uefi-http6)
    # OvmfPkg's runtime options: IPv4PXESupport / IPv6PXESupport for the PXE boot
    # options, IPv4Support / IPv6Support for the network stacks (IPv6Support off
    # leaves no IPv6 boot option at all). Each boot option left on costs about a
    # minute of DHCP timeouts on a segment that does not serve it (PXEv4 on an
    # IPv6-only segment: 65 s). uefi-pxe6 keeps HTTPv6 after PXEv6, which it never
    # reaches when PXEv6 boots.
    off=(IPv4PXESupport IPv4Support)
    fw=()
    if [ "$firmware" = uefi-http6 ]; then
      off+=(IPv6PXESupport)
      fw+=(-boot menu=on,splash-time=3000)
    fi
    for knob in "${off[@]}"; do fw+=(-fw_cfg "name=opt/org.tianocore/$knob,string=no"); done
    # shellcheck disable=SC2207
    args=($(ovmf) "${others[@]}" -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=$boot_nic" "${fw[@]}") ;;
  *) echo "vm.sh: unknown firmware '$firmware' (bios-ipxe, uefi-pxe, uefi-pxe-sb, uefi-http, uefi-pxe6, uefi-http6)" >&2; exit 2 ;;
esac

exec qemu-system-x86_64 "${common[@]}" "${args[@]}"
