#!/usr/bin/env bash
# A real OpenStack Ironic (PyPI `ironic`, 39.x) on loopback, for shardboot's integration
# tests and .ci/run: two or more conductors sharing one database, fake-hardware nodes with
# ports, and "who owns which MAC" as Ironic itself reports it.
#
# Measured on the 2-core dev machine: setup 38-79 s (cold pip cache), then 0.1 s; start
# 12.5 s (fresh DIR, PostgreSQL included, one hash ring rebuild); enroll 20: 8 s; rebalance after stop-conductor:
# 4.5 s with SIGTERM (it deregisters; the API's ring refreshes after
# hash_ring_reset_interval), 11.5 s with --kill (heartbeat_timeout 10 + ring reset 2);
# stop: 6 s.
#
#   lab.sh setup                                venv + `pip install ironic` (idempotent)
#   lab.sh start DIR [--basic-auth USER:PASS] [--conductors K]
#                                               configs, schema, conductors 1..K (default
#                                               2, at most 9), wait
#   lab.sh enroll DIR N                         N nodes + 1 port each, print owners
#   lab.sh owners DIR                           print {"mac","node","conductor"} lines
#   lab.sh conductors DIR                       print GET /v1/conductors (JSON)
#   lab.sh stop-conductor DIR N [--kill] [--no-wait]
#                                               stop conductor N >= 2 (SIGTERM: it
#                                               deregisters; --kill: SIGKILL, a crash,
#                                               noticed after heartbeat_timeout); waits
#                                               until no node is reported on it and
#                                               prints the seconds
#   lab.sh start-conductor DIR N                start conductor N >= 2: again (same
#                                               config), or for the first time (a new
#                                               conductor joining, N at most 9)
#   lab.sh stop DIR                             stop everything (TERM, then KILL)
#   lab.sh curl DIR PATH [curl args...]         curl the API with header (+ auth)
#
# Processes (each in its own session/process group, PGID = PID written to DIR):
#   1: `ironic` (API + conductor), [DEFAULT] host = 127.0.0.1, json-rpc 127.0.0.1:8089,
#      API on 127.0.0.1:${SB_IRONIC_API_PORT:-6385, or a free port when 6385 is taken}
#      -> Ironic reports this conductor as "127.0.0.1"
#   2: `ironic-conductor`, [DEFAULT] host = 127.0.0.2, json-rpc 127.0.0.2:8090
#      -> Ironic reports this conductor as "127.0.0.2:8090"
#   N (3..9): `ironic-conductor`, host 127.0.0.N, json-rpc 127.0.0.N:(8088 + N)
#      -> "127.0.0.N:(8088 + N)", e.g. "127.0.0.3:8091"
#
#   0: the database. Default PostgreSQL (SB_IRONIC_DB=postgresql): a private cluster in
#      DIR/pg, unix socket only (DIR/pg-run, listen_addresses = ''), run as user postgres.
#      SB_IRONIC_DB=sqlite uses DIR/ironic.sqlite instead, but Ironic 39 then disables
#      conductor heartbeats and never refreshes its hash ring (common/hash_ring.py,
#      base_manager._conductor_service_record_keepalive): nodes never move off a stopped
#      conductor, so the rebalance tests need PostgreSQL.
#
# Files in DIR: ironic-N.conf, ironic-N.log, ironic-N.pid, postgres.{pid,log},
# api_url, auth_strategy, db (backend), htpasswd + basic_auth (USER:PASS) with --basic-auth.
# stdout carries only data (JSON); progress and errors go to stderr.
#
# Environment:
#   SB_IRONIC_VENV            venv (default <repo>/target/ironic-venv, inside the build tree)
#   SB_IRONIC_SPEC            pip requirement (default 'ironic==39.*')
#   SB_IRONIC_DB              postgresql (default) or sqlite; setup apt-installs the
#                             Debian package postgresql when it is missing (as root)
#   SB_IRONIC_API_PORT        API port (default 6385 when free, else any free port)
#   SB_IRONIC_START_TIMEOUT   seconds to wait for the API and the conductors (default 120)
#   SB_IRONIC_HEARTBEAT_INTERVAL / SB_IRONIC_HEARTBEAT_TIMEOUT / SB_IRONIC_HASH_RING_RESET
#                             [conductor] heartbeat_interval / heartbeat_timeout and
#                             [DEFAULT] hash_ring_reset_interval (defaults 2 / 10 / 2;
#                             Ironic's own defaults are 10 / 60 / 15)
#   SB_IRONIC_DEBUG=1         [DEFAULT] debug = true
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
VENV=${SB_IRONIC_VENV:-$TARGET_DIR/ironic-venv}
SPEC=${SB_IRONIC_SPEC:-ironic==39.*}
MARKER=$VENV/.shardboot-ironic-ready
API_VERSION_HEADER='X-OpenStack-Ironic-API-Version: 1.89'
HB_INTERVAL=${SB_IRONIC_HEARTBEAT_INTERVAL:-2}
HB_TIMEOUT=${SB_IRONIC_HEARTBEAT_TIMEOUT:-10}
RING_RESET=${SB_IRONIC_HASH_RING_RESET:-2}
START_TIMEOUT=${SB_IRONIC_START_TIMEOUT:-120}
DB_BACKEND=${SB_IRONIC_DB:-postgresql}
case $DB_BACKEND in postgresql|sqlite) ;; *) echo "lab.sh: error: SB_IRONIC_DB must be postgresql or sqlite" >&2; exit 2 ;; esac
PIP_EXTRA=(psycopg2-binary)
# The conductors' identities. Conductor 1's json-rpc port must stay 8089 (Ironic's
# default) for it to be reported as plain "127.0.0.1"; conductor N >= 2 listens on
# 127.0.0.N:(8088 + N) and is reported as "127.0.0.N:(8088 + N)".
MAX_CONDUCTORS=9
c_host() { echo "127.0.0.$1"; }
c_rpc_port() { if [ "$1" = 1 ]; then echo 8089; else echo $((8088 + $1)); fi; }
c_name() { if [ "$1" = 1 ]; then echo 127.0.0.1; else echo "127.0.0.$1:$((8088 + $1))"; fi; }
c_binary() { if [ "$1" = 1 ]; then echo ironic; else echo ironic-conductor; fi; }
# The conductors with a config in DIR, in order.
conductors_in() { # DIR
  local f n
  for f in "$1"/ironic-*.conf; do
    [ -e "$f" ] || continue
    n=${f##*/ironic-}; n=${n%.conf}
    [[ $n =~ ^[0-9]+$ ]] && echo "$n"
  done | sort -n
}

log() { printf 'lab.sh: %s\n' "$*" >&2; }
die() { printf 'lab.sh: error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

# ---------------------------------------------------------------------------------- setup
cmd_setup() {
  [ "$DB_BACKEND" = sqlite ] || ensure_postgres
  if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$SPEC ${PIP_EXTRA[*]}" ] && [ -x "$VENV/bin/ironic" ]; then
    log "ironic already installed in $VENV ($("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ironic"))'))"
    return 0
  fi
  command -v python3 >/dev/null || die "python3 not found"
  local t0; t0=$(now)
  log "creating venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv --clear "$VENV" 2>"$TARGET_DIR/ironic-venv.err"; then
    # Debian ships ensurepip separately (python3-venv).
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "python3 -m venv failed; installing python3-venv"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; } \
        || die "could not install python3-venv"
      python3 -m venv --clear "$VENV" || die "python3 -m venv $VENV failed"
    else
      cat "$TARGET_DIR/ironic-venv.err" >&2
      die "python3 -m venv $VENV failed (install python3-venv)"
    fi
  fi
  rm -f "$TARGET_DIR/ironic-venv.err"
  # pip's cache lives in the build tree too: nothing is cached outside it.
  export PIP_CACHE_DIR=$TARGET_DIR/pip-cache PIP_DISABLE_PIP_VERSION_CHECK=1
  log "pip install '$SPEC' (about a minute)"
  "$VENV/bin/pip" install -q --upgrade pip >&2 || die "pip upgrade failed"
  "$VENV/bin/pip" install -q "$SPEC" "${PIP_EXTRA[@]}" >&2 || die "pip install '$SPEC' ${PIP_EXTRA[*]} failed"
  "$VENV/bin/python" -W ignore -c 'import ironic.command.singleprocess, bcrypt, psycopg2' || die "ironic installed but does not import"
  printf '%s\n' "$SPEC ${PIP_EXTRA[*]}" >"$MARKER"
  log "installed ironic $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("ironic"))') in $(elapsed "$t0") s"
}

# PostgreSQL server binaries (Debian keeps them out of PATH).
pg_bindir() {
  local d
  for d in "$(pg_config --bindir 2>/dev/null || true)" \
           "$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)" \
           "$(dirname "$(readlink -f "$(command -v initdb 2>/dev/null || echo /nonexistent)")")"; do
    [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && { echo "$d"; return 0; }
  done
  return 1
}

ensure_postgres() {
  pg_bindir >/dev/null && return 0
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    || die "PostgreSQL server not found; install the 'postgresql' package or use SB_IRONIC_DB=sqlite"
  log "installing the Debian package postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; } \
    || die "apt-get install postgresql failed"
  # The package starts a system cluster; the lab runs its own and needs nothing listening.
  service postgresql stop >/dev/null 2>&1 || true
  pg_bindir >/dev/null || die "postgresql installed but initdb/postgres not found"
}

require_venv() {
  [ -f "$MARKER" ] && [ -x "$VENV/bin/ironic" ] || die "no Ironic venv at $VENV; run: $0 setup"
}

# ------------------------------------------------------------------------------- helpers
absdir() { mkdir -p "$1" && (cd "$1" && pwd); }

port_free() { # HOST PORT
  python3 -c '
import socket, sys
s = socket.socket()
# Like the servers do: TIME_WAIT leftovers do not make a port busy, a listener does.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError:
    sys.exit(1)
' "$1" "$2"
}

free_port() { # HOST
  python3 -c '
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"
}

# Process names: ironic-1, ironic-2, postgres. PID files DIR/NAME.pid, logs DIR/NAME.log.
pid_of() { # DIR NAME -> pid if that process group is alive
  local f=$1/$2.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  # The leader itself, or what is left of its group (just after the fork the child has not
  # called setsid yet, so the group does not exist yet).
  [ -n "$pid" ] && { kill -0 "$pid" 2>/dev/null || kill -0 -- "-$pid" 2>/dev/null; } && echo "$pid"
}

children_of() { # PID -> its child processes' PIDs (from /proc; no procps needed)
  python3 -c '
import os, sys
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            st = open(f"/proc/{p}/stat").read()
        except OSError:
            continue
        if st[st.rindex(")") + 2:].split()[1] == sys.argv[1]:
            print(p)' "$1"
}

log_tail() { # DIR NAME
  local f=$1/$2.log
  if [ -f "$f" ]; then
    printf -- '---- last 30 lines of %s ----\n' "$f" >&2
    tail -n 30 "$f" >&2
    printf -- '----\n' >&2
  fi
}

fail_with_logs() { # DIR MESSAGE
  local dir=$1; shift
  printf 'lab.sh: error: %s\n' "$*" >&2
  local n
  for n in $(conductors_in "$dir"); do log_tail "$dir" "ironic-$n"; done
  [ "$(cat "$dir/db" 2>/dev/null)" = postgresql ] && log_tail "$dir" postgres
  exit 1
}

api_url() { [ -f "$1/api_url" ] || die "$1/api_url missing (was '$0 start $1' run?)"; cat "$1/api_url"; }

# api DIR PATH [curl args]: curl against the API, body to stdout, fails on HTTP >= 400.
api() {
  local dir=$1 path=$2; shift 2
  local url auth=()
  url=$(api_url "$dir")
  [ -f "$dir/basic_auth" ] && auth=(-u "$(cat "$dir/basic_auth")")
  curl -sS --fail-with-body --max-time 30 --noproxy '*' "${auth[@]}" \
    -H "$API_VERSION_HEADER" -H 'Content-Type: application/json' "$@" "$url$path"
}

# Follows Ironic's "next" links; prints one JSON array of all items under KEY.
api_list() { # DIR PATH KEY
  local dir=$1 path=$2 key=$3 url body all='[]' next
  url=$(api_url "$dir")
  while :; do
    body=$(api "$dir" "$path") || return 1
    read -r all next < <(python3 -c '
import json, sys
acc = json.loads(sys.argv[1]); page = json.loads(sys.argv[2])
acc.extend(page.get(sys.argv[3], []))
nxt = page.get("next") or ""
base = sys.argv[4]
print(json.dumps(acc, separators=(",", ":")), nxt[len(base):] if nxt.startswith(base) else nxt)
' "$all" "$body" "$key" "$url") || return 1
    [ -n "$next" ] || break
    path=$next
  done
  printf '%s\n' "$all"
}

# ----------------------------------------------------------------------------- database
db_url() { # DIR
  if [ "$(cat "$1/db")" = sqlite ]; then
    echo "sqlite:///$1/ironic.sqlite"
  else
    echo "postgresql+psycopg2://ironic@/ironic?host=$1/pg-run"
  fi
}

pg_user_prefix() { # -> command prefix that runs as the postgres user (it refuses root)
  [ "$(id -u)" = 0 ] || return 0
  local u=postgres
  id "$u" >/dev/null 2>&1 || u=nobody
  echo "setpriv --reuid=$u --regid=$(id -g "$u") --init-groups"
}

pg_start() { # DIR
  local dir=$1 bindir prefix owner t
  bindir=$(pg_bindir) || die "PostgreSQL server not found (run '$0 setup', or SB_IRONIC_DB=sqlite)"
  read -r -a prefix <<<"$(pg_user_prefix)"
  [ ${#dir} -le 80 ] || die "DIR too long for a unix socket path (${#dir} > 80 chars): $dir"
  mkdir -p "$dir/pg" "$dir/pg-run"
  if [ ${#prefix[@]} -gt 0 ]; then
    owner=${prefix[1]#--reuid=}
    chmod 0700 "$dir/pg"; chown "$owner" "$dir/pg" "$dir/pg-run"
    chmod a+x "$dir"
    "${prefix[@]}" test -w "$dir/pg" \
      || die "user $owner cannot reach $dir/pg (a parent directory is not world-searchable); use another DIR"
  fi
  if [ ! -f "$dir/pg/PG_VERSION" ]; then
    (cd "$dir/pg" && "${prefix[@]}" "$bindir/initdb" -D "$dir/pg" -U ironic --auth=trust \
        --no-locale -E UTF8 --no-sync) >"$dir/postgres-initdb.log" 2>&1 \
      || { tail -n 30 "$dir/postgres-initdb.log" >&2; die "initdb failed"; }
  fi
  rm -f "$dir/pg/postmaster.pid"
  # Unix socket only; durability off (a throw-away test database).
  (cd "$dir/pg" && exec setsid "${prefix[@]}" "$bindir/postgres" -D "$dir/pg" -k "$dir/pg-run" \
      -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
      -c max_connections=300 >>"$dir/postgres.log" 2>&1 </dev/null) &
  echo $! >"$dir/postgres.pid"
  for ((t = 0; t < 300; t++)); do
    pid_of "$dir" postgres >/dev/null || { log_tail "$dir" postgres; die "postgres exited during start-up"; }
    "$bindir/pg_isready" -q -h "$dir/pg-run" -U ironic -d postgres && break
    sleep 0.1
  done
  "$bindir/pg_isready" -q -h "$dir/pg-run" -U ironic -d postgres || { log_tail "$dir" postgres; die "postgres not ready after 30 s"; }
  if ! "$bindir/psql" -h "$dir/pg-run" -U ironic -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'ironic'" | grep -q 1; then
    "$bindir/createdb" -h "$dir/pg-run" -U ironic ironic || die "createdb ironic failed"
  fi
  log "postgres up (pid $(cat "$dir/postgres.pid"), socket $dir/pg-run)"
}

# ------------------------------------------------------------------------------- config
write_conf() { # DIR N HOST RPC_PORT API_PORT AUTH_STRATEGY
  local dir=$1 n=$2 host=$3 rpc_port=$4 api_port=$5 auth=$6
  mkdir -p "$dir/state-$n" "$dir/tmp-$n" "$dir/locks"
  cat >"$dir/ironic-$n.conf" <<EOF
# Generated by tests/ironic/lab.sh for conductor $n ($host).
[DEFAULT]
host = $host
my_ip = $host
debug = $([ "${SB_IRONIC_DEBUG:-0}" = 1 ] && echo true || echo false)
auth_strategy = $auth
http_basic_auth_user_file = $dir/htpasswd
rpc_transport = json-rpc
state_path = $dir/state-$n
tempdir = $dir/tmp-$n
# How long a process (the API's included) trusts its cached hash ring (default 15 s).
hash_ring_reset_interval = $RING_RESET
enabled_hardware_types = fake-hardware
enabled_bios_interfaces = fake
enabled_boot_interfaces = fake
enabled_console_interfaces = fake
enabled_deploy_interfaces = fake
enabled_firmware_interfaces = fake
enabled_inspect_interfaces = no-inspect
enabled_management_interfaces = fake
enabled_network_interfaces = noop
enabled_power_interfaces = fake
enabled_raid_interfaces = fake
enabled_rescue_interfaces = fake
enabled_storage_interfaces = noop
enabled_vendor_interfaces = fake

[api]
host_ip = 127.0.0.1
port = $api_port

[json_rpc]
# Conductor-to-conductor RPC stays unauthenticated on loopback, also with --basic-auth.
auth_strategy = noauth
host_ip = $host
port = $rpc_port

[conductor]
# A conductor is dead when its last heartbeat is older than heartbeat_timeout
# (defaults 10 / 60 s): this bounds how fast a crashed conductor's nodes move.
heartbeat_interval = $HB_INTERVAL
heartbeat_timeout = $HB_TIMEOUT
automated_clean = false
graceful_shutdown_timeout = 15

[database]
connection = $(db_url "$dir")

[dhcp]
dhcp_provider = none

[oslo_concurrency]
lock_path = $dir/locks

[pxe]
tftp_root = $dir/state-$n/tftpboot
images_path = $dir/state-$n/images
instance_master_path = $dir/state-$n/master_images

[deploy]
http_root = $dir/state-$n/httpboot
http_url = http://$host:$api_port/unused
EOF
}

launch() { # DIR N BINARY
  local dir=$1 n=$2 bin=$3 pid
  # Where this run's part of the (appended) log begins, for start-up error detection.
  touch "$dir/ironic-$n.log"
  stat -c %s "$dir/ironic-$n.log" >"$dir/ironic-$n.logoff"
  # setsid: own session and process group (PGID = PID), so the whole tree (Ironic forks a
  # worker) can be signalled by id; Ironic's drain handler also signals its own group.
  setsid "$VENV/bin/$bin" --config-file "$dir/ironic-$n.conf" \
    >>"$dir/ironic-$n.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/ironic-$n.pid"
  log "started $bin (conductor $n) pid $pid, log $dir/ironic-$n.log"
}

# Prints the names of the alive conductors, one a line.
alive_conductors() { # DIR
  local body
  body=$(api "$1" /v1/conductors 2>/dev/null) || return 1
  python3 -c '
import json, sys
for c in json.loads(sys.argv[1]).get("conductors", []):
    if c.get("alive"):
        print(c["hostname"])' "$body"
}

wait_conductors() { # DIR DEADLINE_SECONDS WANT...
  local dir=$1 limit=$2; shift 2
  local t0 alive ok w n
  t0=$(date +%s)
  while :; do
    for n in $(conductors_in "$dir"); do
      [ -f "$dir/ironic-$n.pid" ] || continue
      if ! pid_of "$dir" "ironic-$n" >/dev/null; then
        fail_with_logs "$dir" "conductor $n (pid $(cat "$dir/ironic-$n.pid")) exited during start-up"
      fi
      # A worker that fails (e.g. a bad interface list) logs and stops, but its master
      # process lives on: fail fast on errors logged since this launch.
      if tail -c "+$(( $(cat "$dir/ironic-$n.logoff" 2>/dev/null || echo 0) + 1 ))" "$dir/ironic-$n.log" \
          | grep -qE '^[0-9-]+ [0-9:.]+ [0-9]+ (ERROR|CRITICAL) '; then
        fail_with_logs "$dir" "conductor $n logged an error during start-up"
      fi
    done
    if alive=$(alive_conductors "$dir"); then
      ok=1
      for w in "$@"; do grep -qxF "$w" <<<"$alive" || ok=0; done
      [ "$ok" = 1 ] && return 0
    fi
    if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then
      fail_with_logs "$dir" "timed out after ${limit}s waiting for conductors [$*] (alive: [$(echo $alive)]) at $(cat "$dir/api_url")"
    fi
    sleep 0.5
  done
}

# -------------------------------------------------------------------------------- start
cmd_start() {
  [ $# -ge 1 ] || usage
  local dir basic="" api_port auth=noauth t0 count=2 n names=()
  dir=$(absdir "$1"); shift
  while [ $# -gt 0 ]; do
    case $1 in
      --basic-auth) [ $# -ge 2 ] || die "--basic-auth needs USER:PASS"; basic=$2; shift 2 ;;
      --basic-auth=*) basic=${1#*=}; shift ;;
      --conductors) [ $# -ge 2 ] || die "--conductors needs a count"; count=$2; shift 2 ;;
      *) die "start: unknown argument '$1'" ;;
    esac
  done
  [[ $count =~ ^[0-9]+$ ]] && [ "$count" -ge 2 ] && [ "$count" -le "$MAX_CONDUCTORS" ] \
    || die "start: --conductors must be 2..$MAX_CONDUCTORS"
  require_venv
  command -v curl >/dev/null || die "curl not found"
  command -v setsid >/dev/null || die "setsid (util-linux) not found"
  local f p
  for f in "$dir"/ironic-*.pid "$dir"/postgres.pid; do
    [ -e "$f" ] || continue
    p=${f##*/}; p=${p%.pid}
    if pid=$(pid_of "$dir" "$p"); then die "$p already running in $dir (pid $pid); '$0 stop $dir' first"; fi
  done
  t0=$(now)
  # Whatever fails from here on, leave nothing running.
  START_DIR=$dir
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "start failed; stopping what was started"; cmd_stop "$START_DIR" || true; fi' EXIT

  if [ -n "${SB_IRONIC_API_PORT:-}" ]; then
    api_port=$SB_IRONIC_API_PORT
    port_free 127.0.0.1 "$api_port" || die "API port 127.0.0.1:$api_port is in use"
  elif port_free 127.0.0.1 6385; then
    api_port=6385
  else
    api_port=$(free_port 127.0.0.1)
  fi
  for ((n = 1; n <= count; n++)); do
    port_free "$(c_host "$n")" "$(c_rpc_port "$n")" \
      || die "json-rpc port $(c_host "$n"):$(c_rpc_port "$n") is in use (another lab running?)"
  done

  rm -f "$dir/basic_auth" "$dir/htpasswd"
  if [ -n "$basic" ]; then
    case $basic in *:*) ;; *) die "--basic-auth wants USER:PASS" ;; esac
    auth=http_basic
    # oslo.middleware accepts only bcrypt digests ($2y$/$2a$/$2b$) in the htpasswd file.
    "$VENV/bin/python" -c '
import bcrypt, sys
user, _, pw = sys.argv[1].partition(":")
print(user + ":" + bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=4)).decode())
' "$basic" >"$dir/htpasswd"
    printf '%s\n' "$basic" >"$dir/basic_auth"
    chmod 600 "$dir/htpasswd" "$dir/basic_auth"
  fi

  # A new start begins with conductors 1..count only (a conductor added to an earlier
  # run of this DIR is not started again).
  rm -f "$dir"/ironic-*.conf
  echo "$DB_BACKEND" >"$dir/db"
  echo "$auth" >"$dir/auth_strategy"
  for ((n = 1; n <= count; n++)); do
    write_conf "$dir" "$n" "$(c_host "$n")" "$(c_rpc_port "$n")" "$api_port" "$auth"
  done
  echo "http://127.0.0.1:$api_port" >"$dir/api_url"

  [ "$DB_BACKEND" = postgresql ] && pg_start "$dir"
  if [ ! -f "$dir/schema-created" ]; then
    [ "$DB_BACKEND" = sqlite ] && rm -f "$dir/ironic.sqlite"
    PYTHONWARNINGS=ignore "$VENV/bin/ironic-dbsync" --config-file "$dir/ironic-1.conf" create_schema \
      >"$dir/dbsync.log" 2>&1 || { tail -n 40 "$dir/dbsync.log" >&2; die "ironic-dbsync create_schema failed"; }
    touch "$dir/schema-created"
  else
    log "reusing the database in $dir"
  fi

  for ((n = 1; n <= count; n++)); do
    launch "$dir" "$n" "$(c_binary "$n")"
    names+=("$(c_name "$n")")
  done
  wait_conductors "$dir" "$START_TIMEOUT" "${names[@]}"
  # All alive is not yet all in the API's hash ring: the API builds its ring once and
  # rebuilds it only every hash_ring_reset_interval, so nodes enrolled at once could all
  # go to the conductor that registered first (seen in CI: 8 of 8 on conductor 1). Wait
  # out one rebuild.
  sleep $((RING_RESET + 1))
  if [ -n "$basic" ]; then
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --noproxy '*' -H "$API_VERSION_HEADER" "$(cat "$dir/api_url")/v1/nodes")
    [ "$code" = 401 ] || fail_with_logs "$dir" "basic auth configured but an unauthenticated request got HTTP $code"
  fi
  trap - EXIT
  log "Ironic up at $(cat "$dir/api_url") ($auth), conductors ${names[*]} alive, in $(elapsed "$t0") s"
}

# Conductor numbers other than 1 (which serves the API and stays up).
check_conductor_number() { # N
  [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 2 ] && [ "$1" -le "$MAX_CONDUCTORS" ] \
    || die "conductor number must be 2..$MAX_CONDUCTORS (1 serves the API), not '$1'"
}

cmd_start_conductor() {
  [ $# -eq 2 ] || die "usage: $0 start-conductor DIR N"
  local dir n api_port; dir=$(absdir "$1"); n=$2
  check_conductor_number "$n"
  require_venv
  if pid=$(pid_of "$dir" "ironic-$n"); then die "conductor $n already running (pid $pid)"; fi
  port_free "$(c_host "$n")" "$(c_rpc_port "$n")" || die "json-rpc port $(c_host "$n"):$(c_rpc_port "$n") is in use"
  if [ ! -f "$dir/ironic-$n.conf" ]; then
    # A conductor joining: the same API, database and auth as the others.
    api_port=$(api_url "$dir"); api_port=${api_port##*:}
    write_conf "$dir" "$n" "$(c_host "$n")" "$(c_rpc_port "$n")" "$api_port" "$(cat "$dir/auth_strategy")"
  fi
  local t0; t0=$(now)
  launch "$dir" "$n" ironic-conductor
  wait_conductors "$dir" "$START_TIMEOUT" "$(c_name "$n")"
  log "conductor $n ($(c_name "$n")) alive in $(elapsed "$t0") s"
}

# ------------------------------------------------------------------------------- owners
# Prints {"mac","node","conductor"} JSON lines, sorted by MAC.
owners_json() { # DIR
  local ports nodes
  ports=$(api_list "$1" "/v1/ports/detail?limit=1000" ports) || return 1
  nodes=$(api_list "$1" "/v1/nodes/detail?limit=1000" nodes) || return 1
  python3 -c '
import json, sys
ports = json.loads(sys.argv[1]); nodes = {n["uuid"]: n for n in json.loads(sys.argv[2])}
for p in sorted(ports, key=lambda p: p["address"]):
    n = nodes.get(p["node_uuid"], {})
    print(json.dumps({"mac": p["address"], "node": p["node_uuid"],
                      "conductor": n.get("conductor")}, separators=(", ", ": ")))
' "$ports" "$nodes"
}

cmd_owners() {
  [ $# -eq 1 ] || usage
  local dir; dir=$(absdir "$1")
  owners_json "$dir" || fail_with_logs "$dir" "could not read ports/nodes from $(api_url "$dir")"
}

cmd_conductors() {
  [ $# -eq 1 ] || usage
  local dir; dir=$(absdir "$1")
  api "$dir" /v1/conductors || fail_with_logs "$dir" "GET /v1/conductors failed"
  echo
}

# ------------------------------------------------------------------------------- enroll
cmd_enroll() {
  [ $# -eq 2 ] || usage
  local dir n existing i mac uuid body t0 owners
  dir=$(absdir "$1"); n=$2
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 65535 ] || die "enroll: N must be 1..65535"
  t0=$(now)
  # Continue numbering after nodes enrolled by an earlier call.
  existing=$(api_list "$dir" "/v1/nodes?limit=1000" nodes | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') \
    || fail_with_logs "$dir" "GET /v1/nodes failed"
  for ((i = existing + 1; i <= existing + n; i++)); do
    [ "$i" -le 65535 ] || die "enroll: out of MACs"
    mac=$(printf '52:54:00:5b:%02x:%02x' $((i >> 8)) $((i & 255)))
    body=$(api "$dir" /v1/nodes -X POST \
      -d "{\"name\": \"sb-lab-$(printf %05d "$i")\", \"driver\": \"fake-hardware\"}") \
      || fail_with_logs "$dir" "POST /v1/nodes failed for node $i: $body"
    uuid=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["uuid"])' "$body")
    body=$(api "$dir" /v1/ports -X POST \
      -d "{\"node_uuid\": \"$uuid\", \"address\": \"$mac\"}") \
      || fail_with_logs "$dir" "POST /v1/ports failed for $mac (node $uuid): $body"
  done
  log "enrolled $n nodes in $(elapsed "$t0") s"
  local deadline=$(( $(date +%s) + 60 ))
  while :; do
    owners=$(owners_json "$dir") || fail_with_logs "$dir" "could not read owners"
    grep -q '"conductor": null' <<<"$owners" || break
    [ "$(date +%s)" -lt "$deadline" ] || fail_with_logs "$dir" "nodes without a conductor after 60 s"
    sleep 0.5
  done
  printf '%s\n' "$owners"
  log "owners: $(python3 -c '
import collections, json, sys
c = collections.Counter(json.loads(l)["conductor"] for l in sys.stdin if l.strip())
print(", ".join(f"{k}: {v}" for k, v in sorted(c.items())))' <<<"$owners")"
}

# --------------------------------------------------------------------------------- stop
group_alive() { kill -0 -- "-$1" 2>/dev/null || kill -0 "$1" 2>/dev/null; }
signal_group() { kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null || true; }

# stop_group DIR NAME SIGNAL GRACE: signal the process group, wait up to GRACE s, then KILL.
stop_group() {
  local dir=$1 n=$2 sig=$3 grace=$4 pid t
  pid=$(pid_of "$dir" "$n") || { rm -f "$dir/$n.pid"; return 0; }
  signal_group "$sig" "$pid"
  for ((t = 0; t < grace * 10; t++)); do
    group_alive "$pid" || break
    sleep 0.1
  done
  if group_alive "$pid"; then
    log "$n (pgid $pid) still running after ${grace}s; SIGKILL"
    signal_group KILL "$pid"
    for ((t = 0; t < 50; t++)); do group_alive "$pid" || break; sleep 0.1; done
    group_alive "$pid" && die "process group $pid survives SIGKILL"
  fi
  # Reap it if it is our child (it never is across invocations; harmless otherwise).
  wait "$pid" 2>/dev/null || true
  rm -f "$dir/$n.pid"
}

cmd_stop_conductor() {
  [ $# -ge 2 ] || usage
  local dir n mode=TERM waitfor=1 t0 owners name
  dir=$(absdir "$1"); n=$2; shift 2
  check_conductor_number "$n"
  name=$(c_name "$n")
  while [ $# -gt 0 ]; do
    case $1 in
      --kill) mode=KILL ;;
      --no-wait) waitfor=0 ;;
      *) die "stop-conductor: unknown argument '$1'" ;;
    esac
    shift
  done
  pid_of "$dir" "ironic-$n" >/dev/null || die "conductor $n is not running"
  t0=$(now)
  stop_group "$dir" "ironic-$n" "$mode" 30
  log "conductor $n stopped (SIG$mode) in $(elapsed "$t0") s"
  [ "$waitfor" = 1 ] || return 0
  # SIGTERM deregisters (the API's ring drops it on its next reset); SIGKILL leaves a stale
  # registration until heartbeat_timeout passes.
  local limit=$(( HB_TIMEOUT + RING_RESET + 60 ))
  while :; do
    owners=$(owners_json "$dir") || fail_with_logs "$dir" "could not read owners"
    grep -qF "\"conductor\": \"$name\"" <<<"$owners" || break
    python3 -c 'import sys; sys.exit(float(sys.argv[1]) < float(sys.argv[2]))' "$(elapsed "$t0")" "$limit" \
      && fail_with_logs "$dir" "nodes still on $name ${limit}s after stopping it"
    sleep 0.25
  done
  log "rebalanced: no node on $name $(elapsed "$t0") s after SIG$mode"
}

cmd_stop() {
  [ $# -eq 1 ] || usage
  local dir t0; dir=$(absdir "$1")
  t0=$(now)
  # TERM all at once (each waits hash_ring_reset_interval while another is online), then
  # wait for each with a bounded grace period, KILL as a fallback; conductor 1 last.
  local all n
  all=$(conductors_in "$dir" | sort -rn)
  for n in $all; do
    if pid=$(pid_of "$dir" "ironic-$n"); then signal_group TERM "$pid"; fi
  done
  for n in $all; do stop_group "$dir" "ironic-$n" TERM 30; done
  # SIGINT: PostgreSQL's fast shutdown. Its children each setsid() into their own process
  # group, so note them first and make sure they are gone too.
  local kids="" pid t
  if pid=$(pid_of "$dir" postgres); then kids=$(children_of "$pid"); fi
  stop_group "$dir" postgres INT 20
  for pid in $kids; do
    for ((t = 0; t < 50; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  log "stopped in $(elapsed "$t0") s"
}

cmd_curl() {
  [ $# -ge 2 ] || usage
  local dir path; dir=$(absdir "$1"); path=$2; shift 2
  api "$dir" "$path" "$@"
}

# ---------------------------------------------------------------------------------- main
[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
  setup) cmd_setup "$@" ;;
  start) cmd_start "$@" ;;
  start-conductor) cmd_start_conductor "$@" ;;
  enroll) cmd_enroll "$@" ;;
  owners) cmd_owners "$@" ;;
  conductors) cmd_conductors "$@" ;;
  stop-conductor) cmd_stop_conductor "$@" ;;
  stop) cmd_stop "$@" ;;
  curl) cmd_curl "$@" ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$cmd' (see $0 --help)" ;;
esac
