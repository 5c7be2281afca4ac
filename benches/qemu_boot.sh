#!/usr/bin/env bash
# Boot time of real firmware, shardboot against dnsmasq, same run: seconds from VM start
# to the machine's request for its per-node iPXE script (the conductor's
# pxelinux.cfg/<mac>) along each firmware path of qemu/vm.sh, and for a three-NIC
# machine (bios-ipxe-3nic: two NICs nobody knows come first, net0 and net1, and the
# booting NIC is net2, so the first stage misses twice). One VM at a time, so the
# boots do not slow each other down; the median of RUNS boots per path and server.
#
#   benches/qemu_boot.sh [runs]          (root; default 1 run)
#
# shardboot: DHCP, TFTP and HTTP (its boot.ipxe chains /v1/boot/<mac>, which chains the
#            conductor); a fresh state dir per boot. Twice: as configured for the tests
#            without [ra], and with [ra] enabled = true (answers iPXE's IPv6 router
#            solicitations, which otherwise wait out ~12 s on an IPv4-only network).
# dnsmasq:   Debian's, DHCP and TFTP (--no-ping, Ironic-style tags); iPXE gets the
#            conductor's boot.ipxe, which chains pxelinux.cfg/<mac>; UEFI HTTP Boot gets
#            snponly.efi from the conductor's web server. A fresh lease file per boot.
# Conductor: a Python stand-in on 192.0.2.1:8088 that stamps every request with
#            CLOCK_BOOTTIME, the clock of /proc/uptime that stamps the VM start.
# All traffic stays in the namespace made here (qemu/lab.sh); every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/rows.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
runs=${1:-1}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "usage: benches/qemu_boot.sh [runs]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "qemu_boot: needs root (network namespace, tap, port 67)" >&2; exit 1; }
boot_limit=240  # seconds from VM start to the per-node request
echo_limit=30   # seconds from that request to the echo line on the console
paths=(bios-ipxe bios-ipxe-3nic uefi-pxe uefi-http)
servers=(shardboot shardboot-ra dnsmasq)
declare -A mac=([bios-ipxe]=52:54:00:5e:01:01 [uefi-pxe]=52:54:00:5e:01:02 [uefi-http]=52:54:00:5e:01:03
  [bios-ipxe-3nic]=52:54:00:5e:01:04)
# NICs ahead of the booting one on the three-NIC machine (connected to nothing).
other_nics=(52:54:00:5e:01:f1 52:54:00:5e:01:f2)

command -v dnsmasq >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsmasq-base >/dev/null
}
for f in /usr/bin/qemu-system-x86_64 /usr/lib/ipxe/undionly.kpxe /usr/lib/ipxe/snponly.efi \
  /usr/share/OVMF/OVMF_CODE_4M.fd /usr/share/OVMF/OVMF_VARS_4M.fd; do
  [ -e "$f" ] || { echo "qemu_boot: missing $f (tests/install-deps.sh, ovmf)" >&2; exit 1; }
done

cargo build --release --locked -q
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot"
# The interpreter itself, not a pyenv shim that might fork: its pid is the one we stop.
python=$(python3 -c 'import sys; print(sys.executable)')

ns="sbqb$$"
work=$(mktemp -d)
vm_pid= server_pid= conductor_pid=
stop() { # PID: TERM, then KILL after 2 s
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || true
  for _ in $(seq 20); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  stop "$vm_pid"; stop "$server_pid"; stop "$conductor_pid"
  qemu/lab.sh down "$ns" || true  # kills anything left in the namespace
  rm -rf "$work"
}
trap cleanup EXIT
qemu/lab.sh up "$ns" 1 192.0.2.1/24
# An array, not a function: a background function would be a subshell whose pid is
# not the server's.
nsx=(ip netns exec "$ns")

# --- shardboot: the config of tests/system/qemu_boot.rs ---------------------------------------
for p in "${paths[@]}"; do echo "\"${mac[$p]}\" = \"a\""; done > "$work/inventory.toml"
cat > "$work/shardboot.toml" <<TOML
[dhcp]
interfaces = ["m0"]
[tftp]
listen = "192.0.2.1:69"
[http]
listen = "192.0.2.1:8080"
[owner]
self = "a"
inventory = "$work/inventory.toml"
[[member]]
name = "a"
http_url = "http://192.0.2.1:8080"
conductor_url = "http://192.0.2.1:8088"
[[subnet]]
network = "192.0.2.0/24"
ranges = ["192.0.2.100 - 192.0.2.199"]
lease_time = 3600
router = "192.0.2.1"
TOML
{ cat "$work/shardboot.toml"; printf '[ra]\nenabled = true\n'; } > "$work/shardboot-ra.toml"
for c in shardboot shardboot-ra; do
  "$bin" check-config --config "$work/$c.toml" --state-dir "$work/check" > /dev/null
done

# --- dnsmasq: what an operator writes for Ironic ---------------------------------------
cat > "$work/dnsmasq.conf" <<'CONF'
# iPXE says so in its user class (77) or with its own option 175: the first stage script.
dhcp-userclass=set:ipxe,iPXE
dhcp-match=set:ipxe,175
# Everything else loads iPXE, chosen by client architecture (option 93).
dhcp-match=set:bios,option:client-arch,0
dhcp-match=set:efi,option:client-arch,7
dhcp-match=set:efi,option:client-arch,9
dhcp-match=set:httpboot,option:client-arch,16
# The tags exclude each other, so the order of the dhcp-boot lines does not matter.
dhcp-boot=tag:ipxe,http://192.0.2.1:8088/boot.ipxe
dhcp-boot=tag:!ipxe,tag:bios,undionly.kpxe
# No option 43 (PXE_DISCOVERY_CONTROL) for OVMF: without pxe-service dnsmasq echoes no
# option 60 PXEClient either, and OVMF then takes the offer as plain DHCP with a boot
# file and loads it at once (seen here). It waits for 43 only when 60 is echoed.
dhcp-boot=tag:!ipxe,tag:efi,snponly.efi
# UEFI HTTP Boot takes an offer only if it echoes HTTPClient in option 60, which the
# client did not ask for: forced. Its boot file is a URL.
dhcp-boot=tag:!ipxe,tag:httpboot,http://192.0.2.1:8088/snponly.efi
dhcp-option-force=tag:!ipxe,tag:httpboot,60,HTTPClient
CONF

# --- the conductor stand-in ------------------------------------------------------------
cat > "$work/conductor.py" <<'PY'
# Serves a directory; prints "<CLOCK_BOOTTIME seconds> <method> <path>" per request, as
# soon as its headers are read.
import functools, http.server, sys, time

class Handler(http.server.SimpleHTTPRequestHandler):
    def stamp(self):
        print(f"{time.clock_gettime(time.CLOCK_BOOTTIME):.3f} {self.command} {self.path}", flush=True)

    def do_GET(self):
        self.stamp()
        super().do_GET()

    def do_HEAD(self):
        self.stamp()
        super().do_HEAD()

    def log_message(self, *args):
        pass

root, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
server = http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, directory=root))
print("ready", flush=True)
server.serve_forever()
PY
www="$work/www"
mkdir -p "$www/pxelinux.cfg"
cp -L /usr/lib/ipxe/snponly.efi "$www/"
# Ironic's boot.ipxe in short: every NIC in turn, the next on a 404.
cat > "$www/boot.ipxe" <<'IPXE'
#!ipxe
set netid:int32 -1
:loop
inc netid
isset ${net${netid}/mac} || exit 1
chain pxelinux.cfg/${net${netid}/mac:hexhyp} || goto loop
IPXE

# --- one boot --------------------------------------------------------------------------
strip() { sed 's/\x1b\[[0-9;?]*[@-~]//g; s/\x1b//g; s/\r//g' "$@" 2>/dev/null; }
uptime_now() { local up _; read -r up _ < /proc/uptime; echo "$up"; }
wait_line() { # FILE PATTERN SECONDS → 0 once FILE holds a line matching PATTERN
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt $deadline ]; do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$server_pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
fail() { # WHAT DIR
  echo "qemu_boot: $1" >&2
  echo "--- console (last 30 lines)" >&2; strip "$2/console.log" | tail -n 30 >&2 || true
  echo "--- server log (last 30 lines)" >&2; tail -n 30 "$2/server.log" >&2 || true
  echo "--- conductor requests" >&2; cat "$2/conductor.log" >&2 || true
  exit 1
}

start_server() { # SERVER DIR
  local d=$2
  case $1 in
    shardboot | shardboot-ra)
      "${nsx[@]}" "$bin" serve --config "$work/$1.toml" --state-dir "$d/state" > "$d/server.log" 2>&1 &
      server_pid=$!
      wait_line "$d/server.log" "HTTP listening" 20 && wait_line "$d/server.log" "DHCP listening" 20 ||
        fail "shardboot did not start" "$d" ;;
    dnsmasq)
      "${nsx[@]}" dnsmasq --no-daemon --conf-file="$work/dnsmasq.conf" --port=0 --interface=m0 \
        --bind-interfaces --dhcp-range=192.0.2.100,192.0.2.199,1h --enable-tftp \
        --tftp-root=/usr/lib/ipxe --no-ping --dhcp-leasefile="$d/leases" --pid-file= \
        --log-facility=- --log-dhcp > "$d/server.log" 2>&1 &
      server_pid=$!
      wait_line "$d/server.log" "TFTP root is" 20 || fail "dnsmasq did not start" "$d" ;;
  esac
}

# boot SERVER PATH RUN → sets $result to the seconds from VM start to the per-node
# request. Not in a subshell: the EXIT trap must see the pids it started.
boot() {
  local server=$1 path=$2 d="$work/$2-$1-$3" m=${mac[$2]}
  mkdir -p "$d"
  printf '#!ipxe\necho booted via %s\npoweroff ||\nsleep 600\n' "$server" > "$www/pxelinux.cfg/${m//:/-}"
  start_server "$server" "$d"
  "${nsx[@]}" "$python" -u "$work/conductor.py" "$www" 192.0.2.1 8088 > "$d/conductor.log" 2>&1 &
  conductor_pid=$!
  wait_line "$d/conductor.log" "^ready" 10 || fail "the conductor stand-in did not start" "$d"
  # Machines meet a server that has been up a while: shardboot's IPv6 responder listens
  # for routers for 3 s after start before it answers. The same pause for every server.
  sleep 3.5

  local t0 at deadline
  t0=$(uptime_now)
  local firmware=$path others=()
  if [ "$path" = bios-ipxe-3nic ]; then firmware=bios-ipxe others=("${other_nics[@]}"); fi
  "${nsx[@]}" qemu/vm.sh "$firmware" tap0 "$m" "$d/console.log" "${others[@]}" > "$d/qemu.log" 2>&1 &
  vm_pid=$!
  deadline=$((SECONDS + boot_limit))
  until at=$(awk -v p="/pxelinux.cfg/${m//:/-}" '$2 == "GET" && $3 == p { print $1; exit }' "$d/conductor.log") && [ -n "$at" ]; do
    [ $SECONDS -lt $deadline ] || fail "$server/$path: no per-node request within ${boot_limit}s" "$d"
    kill -0 "$vm_pid" 2>/dev/null || { cat "$d/qemu.log" >&2; fail "$server/$path: the VM stopped" "$d"; }
    kill -0 "$server_pid" 2>/dev/null || fail "$server/$path: $server exited" "$d"
    sleep 0.1
  done
  # The request alone does not prove iPXE ran the script: wait for its echo.
  deadline=$((SECONDS + echo_limit))
  until strip "$d/console.log" | grep -q "booted via $server"; do
    [ $SECONDS -lt $deadline ] || fail "$server/$path: the console never showed 'booted via $server'" "$d"
    sleep 0.2
  done
  stop "$vm_pid"; vm_pid=
  stop "$conductor_pid"; conductor_pid=
  stop "$server_pid"; server_pid=
  result=$(awk -v a="$t0" -v b="$at" 'BEGIN { printf "%.1f", b - a }')
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A secs=()
echo "VM start -> request for pxelinux.cfg/<mac>, $runs run(s) per path and server, TCG, $(nproc) cores"
for path in "${paths[@]}"; do
  for ((run = 1; run <= runs; run++)); do
    # Alternate the servers within a run so that drift in machine load hits both.
    for server in "${servers[@]}"; do
      boot "$server" "$path" "$run"
      printf '%-15s %-12s run %d: %6s s\n' "$path" "$server" "$run" "$result"
      secs[$path:$server]+=" $result"
    done
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
printf '%-15s %10s %12s %15s %18s %21s\n' path dnsmasq_s shardboot_s shardboot+ra_s \
  dnsmasq/shardboot dnsmasq/shardboot+ra
for path in "${paths[@]}"; do
  dm=$(median <<< "${secs[$path:dnsmasq]}")
  sb=$(median <<< "${secs[$path:shardboot]}")
  ra=$(median <<< "${secs[$path:shardboot-ra]}")
  printf '%-15s %10s %12s %15s %18s %21s\n' "$path" "$dm" "$sb" "$ra" "$(ratio "$dm" "$sb")" "$(ratio "$dm" "$ra")"
done
for path in "${paths[@]}"; do
  row "QEMU $path, s from VM start to the per-node config" "$(median <<< "${secs[$path:shardboot]}")" "$(median <<< "${secs[$path:dnsmasq]}")" "dnsmasq" lower " s"
done
