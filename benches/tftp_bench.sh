#!/usr/bin/env bash
# TFTP throughput: shardboot vs dnsmasq vs tftpd-hpa vs the `tftpd` crate's own server,
# same file, same clients, same run.
#
# Each server runs in its own network namespace (only `lo`, port 69), so nothing
# leaves the machine and all of them can use port 69. shardboot is the real binary,
# `shardboot serve` with DHCP off. Clients are atftp, N downloads with P in parallel,
# blksize 1468, windowsize 1 (option not sent) and 8. dnsmasq and tftpd-hpa do not
# implement windowsize (RFC 7440) and ignore the option.
#
# The `tftpd` crate (1.0.0, the user's first choice) is built from crates.io into
# target/tftpd-crate: it is measured here because shardboot does not use its server
# (thread per transfer, outside tokio); see docs/design.md "TFTP".
#
# usage (root): benches/tftp_bench.sh          env: N=200 P=50 FILE=/usr/lib/ipxe/ipxe.efi
set -euo pipefail
# Exchange lines (target `exchange`, one per DHCP message or transfer) off, as Kea
# runs at WARN and dnsmasq without log-dhcp here: the figures compare the servers' work.
export SHARDBOOT_LOG="${SHARDBOOT_LOG:-info,exchange=warn}"

N=${N:-200}
P=${P:-50}
FILE=${FILE:-/usr/lib/ipxe/ipxe.efi}
WINDOWS=${WINDOWS:-"1 8"}
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/benches/rows.sh"
[ "$(id -u)" = 0 ] || { echo "tftp_bench: needs root (network namespaces)" >&2; exit 1; }
for t in atftp dnsmasq in.tftpd ip bc; do
    command -v "$t" >/dev/null || { echo "tftp_bench: missing $t" >&2; exit 1; }
done
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

target=${CARGO_TARGET_DIR:-$here/target}
(cd "$here" && cargo build --release --locked --quiet)
shardboot_bin=$target/release/shardboot
crate_bin=$target/tftpd-crate/bin/tftpd
[ -x "$crate_bin" ] || cargo install --quiet --locked tftpd --version 1.0.0 --root "$target/tftpd-crate"

base=/dev/shm
[ -d "$base" ] || base=/tmp
work=$(mktemp -d "$base/tftp-bench.XXXXXX")
chmod 755 "$work"
root=$work/root
mkdir -p "$root"
cp -L "$FILE" "$root/ipxe.efi"
chmod -R a+rX "$root"
size=$(stat -c %s "$root/ipxe.efi")

pids=()
namespaces=()
declare -A server_pid=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 0.3
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# start_server NAME CMD... : runs CMD inside a fresh namespace named sbbench-NAME-$$.
start_server() {
    local name=$1; shift
    local ns=sbbench-$name-$$
    ip netns add "$ns"
    namespaces+=("$ns")
    ip netns exec "$ns" ip link set lo up
    # glibc's getaddrinfo (AI_ADDRCONFIG, used by in.tftpd -a) sees no IPv4 address
    # when a namespace has only lo; a veth pair with a TEST-NET-2 address fixes that.
    ip netns exec "$ns" ip link add sbb0 type veth peer name sbb1
    ip netns exec "$ns" ip addr add 198.18.0.1/32 dev sbb0
    ip netns exec "$ns" ip link set sbb0 up
    ip netns exec "$ns" ip link set sbb1 up
    ip netns exec "$ns" "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
    server_pid[$name]=$!
    sleep 0.5
    kill -0 "${pids[-1]}" 2>/dev/null || { echo "tftp_bench: $name did not start:" >&2; cat "$work/$name.log" >&2; exit 1; }
}

cat > "$work/shardboot.toml" <<TOML
state_dir = "$work/shardboot-state"
[dhcp]
enabled = false
[tftp]
listen = "127.0.0.1:69"
root = "$root"
max_transfers = 1000
max_per_client = 1000
[http]
listen = "127.0.0.1:8080"
TOML
start_server shardboot "$shardboot_bin" serve --config "$work/shardboot.toml"
start_server tftpd-crate "$crate_bin" -i 127.0.0.1 -p 69 -d "$root" -r -q
start_server dnsmasq dnsmasq --keep-in-foreground --port=0 --no-resolv --no-hosts \
    --enable-tftp --tftp-root="$root" --tftp-max=1000 --user=root --pid-file= \
    --listen-address=127.0.0.1 --bind-interfaces --quiet-tftp
start_server tftpd-hpa in.tftpd -L -s "$root" -a 127.0.0.1:69 -u root

# cpu_ticks PID -> user+system CPU of PID and its reaped children (tftpd-hpa forks per
# transfer), in clock ticks.
cpu_ticks() {
    awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)

# run_bench NAME WINDOW -> prints "seconds ok server-cpu-ticks" for N downloads. xargs runs atftp
# directly (no shell or timeout wrapper per download: spawning is client cost that
# every server pays equally and would flatten the ratios); files land on tmpfs and
# "ok" counts the byte-identical ones. atftp gives up on its own after its retries;
# the outer timeout bounds the whole run.
run_bench() {
    local name=$1 ws=$2 ns=sbbench-$1-$$
    local out=$work/out-$name-$ws
    local opts=(--option "blksize 1468")
    [ "$ws" != 1 ] && opts+=(--option "windowsize $ws")
    mkdir -p "$out"
    local start end cpu0 cpu1
    cpu0=$(cpu_ticks "${server_pid[$name]}")
    start=$(date +%s.%N)
    seq "$N" | timeout 600 ip netns exec "$ns" xargs -P "$P" -I{} \
        atftp "${opts[@]}" -g -r ipxe.efi -l "$out/{}" 127.0.0.1 69 >/dev/null 2>&1 || true
    end=$(date +%s.%N)
    cpu1=$(cpu_ticks "${server_pid[$name]}")
    local ok=0
    for f in "$out"/*; do cmp -s "$f" "$root/ipxe.efi" && ok=$((ok + 1)); done
    rm -rf "$out"
    echo "$(echo "$end - $start" | bc -l) $ok $((cpu1 - cpu0))"
}

printf "file %s (%d octets), %d downloads, %d parallel atftp clients, blksize 1468\n" \
    "$FILE" "$size" "$N" "$P"
# ratio A B -> A / B with two decimals, or n/a when B is zero.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

printf "%-11s %4s %9s %8s %12s %11s %16s\n" server window ok "MB/s" "transfers/s" "vs dnsmasq" "server CPU ms/tx"
for ws in $WINDOWS; do
    declare -A rate=()
    for name in dnsmasq tftpd-hpa tftpd-crate shardboot; do
        read -r secs ok ticks < <(run_bench "$name" "$ws")
        mbs=$(echo "$ok * $size / $secs / 1000000" | bc -l)
        tps=$(echo "$ok / $secs" | bc -l)
        rate[$name]=$tps
        vs=$(ratio "$tps" "${rate[dnsmasq]}")
        # in.tftpd forks a child per transfer and does not wait for it, so its CPU
        # is not accounted to the listener.
        cpu=$(printf "%.2f" "$(echo "$ticks * 1000 / $hz / $N" | bc -l)")
        [ "$name" = tftpd-hpa ] && cpu=n/a
        printf "%-11s %4s %4d/%-4d %8.1f %12.1f %10sx %16s\n" \
            "$name" "$ws" "$ok" "$N" "$mbs" "$tps" "$vs" "$cpu"
    done
    row "TFTP ipxe.efi, windowsize $ws, transfers/s" "$(printf %.0f "${rate[shardboot]}")" "$(printf %.0f "${rate[dnsmasq]}")" "dnsmasq" higher
    printf "windowsize %s: shardboot / dnsmasq %sx, / tftpd-hpa %sx, / tftpd crate %sx\n" "$ws" \
        "$(ratio "${rate[shardboot]}" "${rate[dnsmasq]}")" \
        "$(ratio "${rate[shardboot]}" "${rate[tftpd-hpa]}")" \
        "$(ratio "${rate[shardboot]}" "${rate[tftpd-crate]}")"
done

# Memory with many transfers at once: CONC simultaneous downloads, peak resident set of
# the server process (shardboot caches the file once and shares it; the tftpd crate runs
# a thread per transfer).
CONC=${CONC:-500}
for name in shardboot tftpd-crate; do
    pid=${server_pid[$name]}
    rss0=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    out=$work/out-mem-$name
    mkdir -p "$out"
    seq "$CONC" | timeout 600 ip netns exec "sbbench-$name-$$" xargs -P "$CONC" -I{} \
        atftp --option "blksize 1468" --option "windowsize 8" -g -r ipxe.efi -l "$out/{}" \
        127.0.0.1 69 >/dev/null 2>&1 || true
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    ok=0
    for f in "$out"/*; do cmp -s "$f" "$root/ipxe.efi" && ok=$((ok + 1)); done
    rm -rf "$out"
    printf "%s, %d concurrent downloads (windowsize 8): %d/%d ok, RSS %d KiB before, peak %d KiB\n" \
        "$name" "$CONC" "$ok" "$CONC" "$rss0" "$hwm"
done
