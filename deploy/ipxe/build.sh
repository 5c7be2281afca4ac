#!/bin/sh
# Builds the site's iPXE for TLS boot (docs/tls-boot.md): Debian's `ipxe` source
# package, HTTPS on, the site's CA built in as the only trusted root, and the embedded
# script deploy/ipxe/embed.ipxe, which chains what the answering member tells it over
# DHCP (no host is built in). One build serves every member.
#
#   deploy/ipxe/build.sh --ca site-ca.pem --out DIR [--suite SUITE] [--source DIR]
#
# Outputs DIR/undionly.kpxe (BIOS), DIR/snponly.efi (x86-64 UEFI, also as
# snponly-x86_64.efi, ironic-image's name) and DIR/BUILDINFO. Reproducible: the source
# is one Debian version, the build runs in one fixed directory, and SOURCE_DATE_EPOCH is
# the date of that version's changelog entry, so the same CA and version give the same
# bytes.
#
# --suite (default trixie): the Debian suite whose source is built. bookworm's iPXE
# (2019) cannot talk to shardboot's TLS listener: rustls offers only ECDHE key exchange
# with AEAD ciphers, which iPXE gained in 2022 (GCM) and 2024 (ECDHE). Until iPXE
# verifies ECDSA (upstream since late 2025), the member certificates must be RSA.
# --source: an ipxe source tree already unpacked by `apt-get source` / `dpkg-source
# -x` (for a build host without a deb-src line); nothing else is ever downloaded.
# Needs the Debian packages dpkg-dev, gcc, make, perl, liblzma-dev and openssl.
set -eu

ca='' out='' suite=trixie source=''
while [ $# -gt 0 ]; do
    case "$1" in
    --ca) ca=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --suite) suite=$2; shift 2 ;;
    --source) source=$2; shift 2 ;;
    *) echo "usage: $0 --ca site-ca.pem --out DIR [--suite SUITE] [--source DIR]" >&2; exit 2 ;;
    esac
done
if [ -z "$ca" ] || [ -z "$out" ]; then
    echo "$0: --ca and --out are required" >&2
    exit 2
fi
[ -r "$ca" ] || { echo "$0: cannot read $ca" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
ca=$(cd "$(dirname "$ca")" && pwd)/$(basename "$ca")
mkdir -p "$out"
out=$(cd "$out" && pwd)

# One fixed place: paths end up in debug strings, and the same path gives the same bytes.
work=/var/tmp/shardboot-ipxe-build
rm -rf "$work"
mkdir -p "$work"

if [ -z "$source" ]; then
    # A deb-src line in a scratch apt configuration of its own: the machine's sources
    # and package lists are left alone.
    apt_dir=$work/apt
    mkdir -p "$apt_dir/lists/partial"
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
    echo "deb-src ${mirror:-http://deb.debian.org/debian} $suite main" >"$apt_dir/sources.list"
    set -- -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
        -o Dir::State::Lists="$apt_dir/lists"
    apt-get "$@" update
    (cd "$work" && apt-get "$@" source "ipxe/$suite")
    source=$(find "$work" -maxdepth 1 -type d -name 'ipxe-*' | head -n1)
    [ -n "$source" ] || { echo "$0: apt-get source ipxe/$suite unpacked nothing" >&2; exit 1; }
fi
cp -a "$source" "$work/ipxe"
src=$work/ipxe/src

SOURCE_DATE_EPOCH=$(cd "$work/ipxe" && dpkg-parsechangelog -STimestamp)
export SOURCE_DATE_EPOCH
version=$(cd "$work/ipxe" && dpkg-parsechangelog -SVersion)

# HTTPS on; everything else as Debian's source sets it. iPXE reads config/local/*.h
# after its defaults (src/config/general.h names this file).
cat >"$src/config/local/general.h" <<'EOF'
#define DOWNLOAD_PROTO_HTTPS
EOF
cp "$here/embed.ipxe" "$work/embed.ipxe"
cp "$ca" "$work/site-ca.pem"

# TRUST=: the only root iPXE trusts (it reads trust settings once, at start-up, and
# never from DHCP); CERT=: the CA itself, so a chain the server sends without its root
# still completes without fetching anything.
cd "$src"
for target in bin/undionly.kpxe bin-x86_64-efi/snponly.efi; do
    make -j1 NO_WERROR=1 EMBED="$work/embed.ipxe" TRUST="$work/site-ca.pem" \
        CERT="$work/site-ca.pem" "$target"
done

install -m 0644 bin/undionly.kpxe "$out/undionly.kpxe"
install -m 0644 bin-x86_64-efi/snponly.efi "$out/snponly.efi"
install -m 0644 bin-x86_64-efi/snponly.efi "$out/snponly-x86_64.efi"
fingerprint=$(openssl x509 -in "$ca" -noout -fingerprint -sha256 2>/dev/null | sed 's/.*=//' || true)
{
    echo "ipxe-source: $version ($suite)"
    echo "source-date-epoch: $SOURCE_DATE_EPOCH"
    echo "trusted-ca-sha256: ${fingerprint:-unknown}"
    (cd "$out" && sha256sum undionly.kpxe snponly.efi)
} >"$out/BUILDINFO"
cat "$out/BUILDINFO"
