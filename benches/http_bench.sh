#!/usr/bin/env bash
# The boot route under load, side by side in one run: wrk against shardboot's
# /v1/boot/{mac}/boot.ipxe (a random MAC per request out of 10,000, every one known from
# the Ironic resolver's warm cache), against nginx and Python's http.server serving a
# static script of the same size, and against shardboot again after Ironic went away
# (the cached answers must not get slower). Prints requests/s and p99 for each.
# The two conductors are one nginx server block that has a config for every machine; it
# logs every HEAD (shardboot's check before chaining), and the bench counts them: at
# most one per per-node URL per cache period (http::chain_check::CACHE_TTL, 4 s).
#
#   benches/http_bench.sh [seconds] [connections]
#   SB_BIN=/tmp/before benches/http_bench.sh ...   # another build, e.g. for before/after
#   SB_BIN=/tmp/before SB_BIN_B=/tmp/after [ROUNDS=3] benches/http_bench.sh 8   # both
#       builds at once, each warm, their random-route runs alternated ROUNDS times with
#       nginx's (a lever's before and after within the same minutes of a noisy machine)
#   PERF_RUN="shardboot one MAC's route" benches/http_bench.sh ...   # perf record -g of
#       that run's server, into $PERF_OUT (/tmp/shardboot-http.perf), for perf report -i
#
# The Ironic here is a static file tree in Ironic's wire format (the JSON of
# /v1/ports/detail and /v1/nodes/detail, built from the same fields a real Ironic 39
# returns, see fixtures/ironic/) served by Python: enrolling 10,000 nodes in a real
# Ironic takes about an hour on this machine. tests/members/ironic_routing.rs covers the real one.
# Everything listens on 127.0.0.1; each run is bounded by wrk -d.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/rows.sh
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
secs=${1:-10}
conns=${2:-64}
macs=10000

command -v wrk >/dev/null && command -v nginx >/dev/null || tests/install-deps.sh
if [ -z "${SB_BIN:-}" ]; then cargo build --release --locked -q; fi
bin=${SB_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/shardboot}
work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # URL
  for _ in $(seq 100); do curl -sf -o /dev/null --noproxy '*' "$1" && return 0; sleep 0.1; done
  echo "http_bench: $1 did not come up" >&2; exit 1
}

# ---- the fake Ironic: ports and nodes, every node on one of two conductors
ironic_port=$(free_port)
python3 - "$work/ironic" "$macs" <<'EOF'
import json, os, sys, uuid
root, n = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{root}/v1/ports"); os.makedirs(f"{root}/v1/nodes")
ports, nodes, lines = [], [], []
for i in range(n):
    mac = "52:54:01:%02x:%02x:%02x" % (i >> 16, (i >> 8) & 255, i & 255)
    node = str(uuid.UUID(int=i + 1))
    ports.append({"uuid": str(uuid.UUID(int=(1 << 64) + i)), "address": mac,
                  "node_uuid": node, "pxe_enabled": True, "extra": {}})
    nodes.append({"uuid": node, "name": f"bench-{i}", "driver": "fake-hardware",
                  "conductor": "127.0.0.1" if i % 2 else "127.0.0.2:8090"})
    lines.append(mac)
json.dump({"ports": ports}, open(f"{root}/v1/ports/detail", "w"))
json.dump({"nodes": nodes}, open(f"{root}/v1/nodes/detail", "w"))
open(f"{root}/../macs.txt", "w").write("\n".join(lines) + "\n")
EOF
(cd "$work/ironic" && exec python3 -m http.server -b 127.0.0.1 "$ironic_port" >/dev/null 2>&1) &
ironic_pid=$!; pids+=("$ironic_pid")
wait_http "http://127.0.0.1:$ironic_port/v1/ports/detail"

# ---- the conductors: nginx, a config for every machine, every HEAD logged
conductor_port=$(free_port)
cat >"$work/conductor.conf" <<EOF
worker_processes 1;
pid $work/conductor.pid;
error_log $work/conductor-error.log;
events { worker_connections 1024; }
http {
  map \$request_method \$is_head { HEAD 1; default 0; }
  log_format heads '\$msec \$uri';
  access_log $work/conductor-heads.log heads if=\$is_head;
  client_body_temp_path $work/conductor-tmp;
  server { listen 127.0.0.1:$conductor_port; location / { return 200 "#!ipxe\\nexit\\n"; } }
}
EOF
nginx -c "$work/conductor.conf" -g 'daemon off;' &
pids+=($!)
wait_http "http://127.0.0.1:$conductor_port/c1/pxelinux.cfg/52-54-01-00-00-01"

# ---- shardboot: member a of two, HTTP only
(umask 077 && openssl rand -hex 32 >"$work/member-secret")
start_shardboot() { # BIN NAME: starts BIN as member a on a port of its own, its Ironic
  # cache warm; sets sb_port and sb_pid
  local bin=$1 name=$2
  sb_port=$(free_port)
  cat >"$work/$name.toml" <<EOF
state_dir = "$work/$name-state"
[dhcp]
enabled = false
[tftp]
enabled = false
[http]
listen = "127.0.0.1:$sb_port"
[owner]
self = "a"
member_secret_file = "$work/member-secret"
[owner.ironic]
url = "http://127.0.0.1:$ironic_port"
page_size = 10000
refresh_secs = 5
[[member]]
name = "a"
http_url = "http://127.0.0.1:$sb_port"
conductor = "127.0.0.1"
conductor_url = "http://127.0.0.1:$conductor_port/c1"
[[member]]
name = "b"
http_url = "http://127.0.0.1:9"
conductor = "127.0.0.2:8090"
conductor_url = "http://127.0.0.1:$conductor_port/c2"
EOF
  SHARDBOOT_LOG=warn "$bin" -c "$work/$name.toml" serve 2>"$work/$name.log" &
  sb_pid=$!; pids+=("$sb_pid")
  wait_http "http://127.0.0.1:$sb_port/healthz"
  for _ in $(seq 100); do
    curl -s "http://127.0.0.1:$sb_port/metrics" | grep -q "^shardboot_owner_ironic_snapshot_macs $macs" && break
    sleep 0.1
  done
  curl -s "http://127.0.0.1:$sb_port/metrics" | grep -q "^shardboot_owner_ironic_snapshot_macs $macs" \
    || { echo "http_bench: the Ironic cache did not warm" >&2; cat "$work/$name.log" >&2; exit 1; }
}
if [ -n "${SB_BIN_B:-}" ]; then
  start_shardboot "$SB_BIN_B" shardboot-b
  b_port=$sb_port b_pid=$sb_pid
fi
start_shardboot "$bin" shardboot

# ---- static references: one file the size of a chain script
curl -s "http://127.0.0.1:$sb_port/v1/boot/52:54:01:00:00:01/boot.ipxe" >"$work/static.ipxe"
mkdir -p "$work/www"; cp "$work/static.ipxe" "$work/www/boot.ipxe"
nginx_port=$(free_port)
cat >"$work/nginx.conf" <<EOF
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx-tmp;
  server {
    listen 127.0.0.1:$nginx_port; root $work/www;
    # The same file for every /v1/boot/<mac>/boot.ipxe: nginx is then driven by the same
    # wrk script as shardboot, whose Lua request() costs wrk (on the same cores) CPU.
    location /v1/boot/ { try_files /boot.ipxe =404; }
  }
}
EOF
nginx -c "$work/nginx.conf" -g 'daemon off;' &
nginx_pid=$!; pids+=("$nginx_pid")
py_port=$(free_port)
(cd "$work/www" && exec python3 -m http.server -b 127.0.0.1 "$py_port" >/dev/null 2>&1) &
pids+=($!)
wait_http "http://127.0.0.1:$nginx_port/boot.ipxe"
wait_http "http://127.0.0.1:$py_port/boot.ipxe"

# wrk picks a random known MAC for every request.
cat >"$work/macs.lua" <<EOF
local macs = {}
for line in io.lines("$work/macs.txt") do macs[#macs + 1] = line end
math.randomseed(os.time())
request = function()
  return wrk.format("GET", "/v1/boot/" .. macs[math.random(#macs)] .. "/boot.ipxe")
end
EOF

results=()
# CPU time (user + system ticks) of a server: its process and, for nginx, its workers.
ticks_of() { # PID
  local p t=0
  for p in "$1" $(pgrep -P "$1" || true); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
run() { # NAME SERVER_PID URL [lua]: requests/s, p99 and the server's CPU per request
  local name=$1 pid=$2 url=$3 out rps p99 before after n cpu
  before=$(ticks_of "$pid")
  local perf_pid=
  if [ "${PERF_RUN:-}" = "$name" ]; then
    perf record -q -g -F 999 -p "$pid" -o "${PERF_OUT:-/tmp/shardboot-http.perf}" -- sleep "$secs" 2>/dev/null &
    perf_pid=$!
  fi
  out=$(wrk -t2 -c"$conns" -d"${secs}s" --latency ${4:+-s "$4"} "$url")
  after=$(ticks_of "$pid")
  [ -z "$perf_pid" ] || wait "$perf_pid" || true
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  n=$(awk '/requests in/ {print $1}' <<<"$out")
  cpu=$(awk -v t="$((after - before))" -v hz="$(getconf CLK_TCK)" -v n="${n:-0}" \
    'BEGIN { if (n > 0) printf "%.1f", t / hz * 1e6 / n; else print "n/a" }')
  if grep -q "Non-2xx" <<<"$out"; then echo "http_bench: $name answered non-2xx" >&2; echo "$out" >&2; exit 1; fi
  printf '%-38s %12s req/s   p99 %-9s server CPU %s µs/request\n' "$name" "$rps" "$p99" "$cpu"
  results+=("$name=$rps" "$name cpu=$cpu")
}

# The conductor's HEADs during one run: how many, for how many URLs, and the shortest
# time between two for one URL (the cache period or more when checks are shared).
heads() { # NAME
  awk -v name="$1" '
    { n++; if ($2 in last) { gap = $1 - last[$2]; if (min == "" || gap < min) min = gap } else urls++
      last[$2] = $1; if (first == "") first = $1; end = $1 }
    END { if (!n) { printf "%-34s no HEAD at the conductor\n", name; exit }
          printf "%-34s %d HEADs at the conductor (%.0f/s), %d URLs, shortest gap for one URL %s\n",
            name, n, n / ((end - first) > 0 ? end - first : 1), urls, (min == "" ? "-" : sprintf("%.2f s", min)) }' \
    "$work/conductor-heads.log"
  : >"$work/conductor-heads.log"
}

if [ -n "${SB_BIN_B:-}" ]; then
  # Two builds side by side, both warm, their route runs alternated within one run.
  echo "wrk -t2 -c$conns -d${secs}s, 2-core machine; A = $bin, B = $SB_BIN_B"
  : >"$work/conductor-heads.log"
  for _ in $(seq "${ROUNDS:-3}"); do
    run "A /v1/boot/{mac} (Ironic up)" "$sb_pid" "http://127.0.0.1:$sb_port" "$work/macs.lua"
    heads "  its checks"
    run "B /v1/boot/{mac} (Ironic up)" "$b_pid" "http://127.0.0.1:$b_port" "$work/macs.lua"
    heads "  its checks"
    run "nginx static, random /v1/boot URL" "$nginx_pid" "http://127.0.0.1:$nginx_port" "$work/macs.lua"
  done
  exit 0
fi
echo "wrk -t2 -c$conns -d${secs}s, 2-core machine, everything on 127.0.0.1"
: >"$work/conductor-heads.log"
run "shardboot /v1/boot/{mac} (Ironic up)" "$sb_pid" "http://127.0.0.1:$sb_port" "$work/macs.lua"
heads "  its checks"
# One machine asking again and again (its check always cached), and /healthz: what the
# route costs beyond the HTTP stack itself.
run "shardboot one MAC's route" "$sb_pid" "http://127.0.0.1:$sb_port/v1/boot/52:54:01:00:00:01/boot.ipxe"
run "shardboot /healthz" "$sb_pid" "http://127.0.0.1:$sb_port/healthz"
run "nginx static boot.ipxe" "$nginx_pid" "http://127.0.0.1:$nginx_port/boot.ipxe"
run "nginx static, random /v1/boot URL" "$nginx_pid" "http://127.0.0.1:$nginx_port" "$work/macs.lua"
run "python http.server boot.ipxe" "$(pgrep -f "http.server -b 127.0.0.1 $py_port" | head -1)" "http://127.0.0.1:$py_port/boot.ipxe"
kill "$ironic_pid"; wait "$ironic_pid" 2>/dev/null || true
# Let a refresh fail so the cache is stale for the whole run.
for _ in $(seq 40); do
  curl -s "http://127.0.0.1:$sb_port/metrics" | grep -q '^shardboot_owner_ironic_up 0' && break
  sleep 0.5
done
run "shardboot /v1/boot/{mac} (Ironic down)" "$sb_pid" "http://127.0.0.1:$sb_port" "$work/macs.lua"
heads "  its checks"
rate_of() { local r; for r in "${results[@]}"; do [ "${r%%=*}" = "$1" ] && echo "${r#*=}"; done; }
row "HTTP /v1/boot/{mac} (owner from Ironic), requests/s" "$(rate_of "shardboot /v1/boot/{mac} (Ironic up)")" "$(rate_of "nginx static, random /v1/boot URL")" "nginx, a static file, same wrk script" higher
row "HTTP /v1/boot/{mac} (owner from Ironic), server CPU per request" "$(rate_of "shardboot /v1/boot/{mac} (Ironic up) cpu")" "$(rate_of "nginx static, random /v1/boot URL cpu")" "nginx, a static file, same wrk script" lower " µs"
row "HTTP /v1/boot/{mac}, one machine (check cached), requests/s" "$(rate_of "shardboot one MAC's route")" "$(rate_of "nginx static boot.ipxe")" "nginx, a static file" higher
curl -s "http://127.0.0.1:$sb_port/metrics" | grep -E '^shardboot_(owner_ironic_(up|cache_total)|http_chain_checks_total)' || true
