#!/usr/bin/env bash
# Installs the Debian packages the test suite and benchmarks drive (real DHCP/TFTP clients,
# load tools, reference servers). Idempotent: does nothing when all are present.
set -euo pipefail

packages=(
  iproute2          # ip netns, veth
  isc-dhcp-client   # dhclient
  dhcpcd-base       # dhcpcd -6, run only in the tests' namespaces (never the `dhcpcd` package: its service would run DHCP on this host's interfaces)
  udhcpc            # busybox udhcpc
  kea-admin         # perfdhcp
  kea-dhcp4-server  # reference server for benchmarks
  kea-dhcp6-server  # reference DHCPv6 server for benches/dhcp6_vs.sh
  dnsmasq-base      # reference server for benchmarks
  tftp-hpa atftp curl tftpd-hpa
  ipxe              # undionly.kpxe, snponly.efi, ipxe.efi
  qemu-system-x86   # real firmware: SeaBIOS and the iPXE option ROM (tests/system/qemu_boot.rs)
  ipxe-qemu         # the iPXE option ROMs of QEMU's NICs
  ovmf              # UEFI firmware for the UEFI PXE and HTTP Boot paths (qemu/vm.sh)
  sbsigntool efitools openssl  # sbsign/sbverify, cert-to-efi-sig-list and the test key: the Secure Boot test (tests/system/qemu_secure_boot.rs)
  ndisc6 radvd      # IPv6 router discovery client and a real IPv6 router (tests/dhcp6/ra_responder.rs)
  tcpdump           # SB_CAPTURE_DIR: pcaps of the QEMU boots (tests/common/qemu.rs Capture)
  chromium          # headless browser for the /ui page (tests/http/operator_ui.rs)
  postgresql        # the database of the real Ironic (tests/ironic/lab.sh)
  python3-venv      # the venv Ironic is pip-installed into (inside target/)
  wrk               # HTTP load for benches/http_bench.sh
  nginx-light       # the static-file reference server of benches/http_bench.sh
  podman runc       # the container tests (tests/system/container.rs, deb.rs); settings in deploy/podman/containers.conf
  mmdebstrap        # the image's Debian root (deploy/image.sh) and the .deb test's clean container (tests/system/deb.rs)
  dpkg-dev          # dpkg-shlibdeps: the .deb's library dependencies (deploy/deb.sh)
  systemd           # systemd-analyze verify/security of the .deb's unit (tests/system/deb.rs)
  mariadb-server    # the shared lease store tests start their own server (tests/common/db.rs)
  iptables          # the nemesis cuts one member off from the database (tests/members/shared.rs)
  libfaketime       # the nemesis runs a member on a clock two hours off (LD_PRELOAD)
  binutils libcap2-bin   # strip and setcap for the image's binary
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# kea-dhcp4-server, kea-dhcp6-server, tftpd-hpa, postgresql, nginx and radvd start system services on install; the tests run their
# own instances in namespaces and need nothing listening on the host.
for svc in kea-dhcp4-server kea-dhcp6-server tftpd-hpa postgresql mariadb nginx radvd; do
  systemctl stop "$svc" 2>/dev/null || service "$svc" stop 2>/dev/null || true
done
