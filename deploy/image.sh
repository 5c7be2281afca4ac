#!/usr/bin/env bash
# Builds the shardboot OCI image offline from Debian packages and imports it into
# podman's local storage; no registry is pulled from.
#
#   deploy/image.sh                                  # release build → localhost/shardboot:<version>
#   BIN=target/debug/shardboot TAG=localhost/shardboot:test deploy/image.sh
#
# The image: a Debian minbase root (mmdebstrap) with iproute2 (ss) and ipxe, the binary
# with file capabilities NET_ADMIN, NET_RAW, NET_BIND_SERVICE (a non-root process gets
# capabilities only from its file, as ironic-image does for dnsmasq), user 997:994
# (IrSO's dnsmasq user), Debian's iPXE files under ironic-image's names in /tftpboot,
# and the lease store at /var/lib/shardboot (mount a volume there; the root can be
# read-only). It starts `shardboot serve --env ironic-image`; /bin/rundnsmasq does the
# same, so a pod spec that keeps ironic-image's command still works.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "deploy/image.sh: run as root (mmdebstrap, setcap)" >&2; exit 1; }
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
TAG=${TAG:-localhost/shardboot:$version}
SUITE=${SUITE:-bookworm}
if [ -z "${BIN:-}" ]; then
  # The commit goes into --version, the start-up line and shardboot_build_info.
  SHARDBOOT_COMMIT=${SHARDBOOT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)} \
    cargo build --release --locked
  BIN=${CARGO_TARGET_DIR:-target}/release/shardboot
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
# Documentation, manuals and translations are of no use in a container. The merged-usr
# hook lays out /usr itself: otherwise the usrmerge package, and with it the whole of
# perl (about 50 MB), is installed to do it.
mmdebstrap --quiet --variant=minbase --include=iproute2,ipxe \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  "$SUITE" "$root"

install -m 0755 "$BIN" "$root/usr/bin/shardboot"
# Debug info is most of a build's size; strip before setcap (strip rewrites the file,
# which drops its capabilities).
strip --strip-debug "$root/usr/bin/shardboot"
setcap cap_net_admin,cap_net_raw,cap_net_bind_service=ep "$root/usr/bin/shardboot"
printf '#!/bin/sh\nexec /usr/bin/shardboot serve --env ironic-image "$@"\n' >"$root/usr/bin/rundnsmasq"
chmod 0755 "$root/usr/bin/rundnsmasq"

# ironic-image's built-in firmware directory, under the names its dnsmasq hands out.
# Hard links: no symlink for the TFTP root's link rule to judge, no second copy.
mkdir -p "$root/tftpboot"
ln "$root/usr/lib/ipxe/undionly.kpxe" "$root/tftpboot/undionly.kpxe"
ln "$root/usr/lib/ipxe/snponly.efi" "$root/tftpboot/snponly-x86_64.efi"

echo 'ironic:x:997:994:shardboot:/var/lib/shardboot:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'ironic:x:994:' >>"$root/etc/group"
# setgid and group-writable, like ironic-image's dnsmasq data directory, so a volume
# mounted with fsGroup 994 stays writable.
install -d -o 997 -g 994 -m 2775 "$root/var/lib/shardboot"

tar --numeric-owner --xattrs --xattrs-include='security.capability' \
  -C "$root" -cf "$work/rootfs.tar" .
podman import \
  --change 'USER 997:994' \
  --change 'WORKDIR /var/lib/shardboot' \
  --change 'VOLUME /var/lib/shardboot' \
  --change 'ENTRYPOINT ["/usr/bin/shardboot"]' \
  --change 'CMD ["serve", "--env", "ironic-image"]' \
  "$work/rootfs.tar" "$TAG" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$TAG")
echo "image $TAG: $((size / 1024 / 1024)) MiB"
