#!/usr/bin/env bash
# End-to-end check of lab.sh against a real Ironic: noauth and http_basic runs, 20 nodes
# split over both conductors, graceful and crash (SIGKILL) rebalancing, clean stop.
# Usage: tests/ironic/selftest.sh [WORKDIR]   (default <repo>/target/ironic-selftest)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB=$HERE/lab.sh
WORK=${1:-$(cd "$HERE/../.." && pwd)/target/ironic-selftest}
H='X-OpenStack-Ironic-API-Version: 1.89'
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }
count() { grep -c -- "$2" <<<"$1" || true; }
DIR=
cleanup() { [ -z "$DIR" ] || "$LAB" stop "$DIR" || true; }
trap cleanup EXIT

"$LAB" setup

run() { # NAME [start args]
  local name=$1; shift
  DIR=$WORK/$name
  rm -rf "$DIR"; mkdir -p "$DIR"
  "$LAB" start "$DIR" "$@"
  local url; url=$(cat "$DIR/api_url")
  local owners
  owners=$("$LAB" enroll "$DIR" 20)
  [ "$(count "$owners" '"mac"')" = 20 ] && ok "$name: 20 MACs enrolled" || bad "$name: enrolled $(count "$owners" '"mac"')"
  local c1 c2
  c1=$(count "$owners" '"conductor": "127.0.0.1"'); c2=$(count "$owners" '"conductor": "127.0.0.2:8090"')
  [ "$c1" -gt 0 ] && [ "$c2" -gt 0 ] && [ $((c1 + c2)) = 20 ] && ok "$name: split $c1/$c2" || bad "$name: split $c1/$c2"
  # Ironic's own per-node view agrees with the owners list.
  local line mac node cond got
  line=$(grep -m1 '127.0.0.2:8090' <<<"$owners")
  node=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["node"])' "$line")
  got=$("$LAB" curl "$DIR" "/v1/nodes/$node" | python3 -c 'import json,sys; print(json.load(sys.stdin)["conductor"])')
  [ "$got" = 127.0.0.2:8090 ] && ok "$name: GET /v1/nodes/{id} agrees" || bad "$name: node $node conductor $got"
  if [ -f "$DIR/basic_auth" ]; then
    local code
    code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' -H "$H" "$url/v1/nodes")
    [ "$code" = 401 ] && ok "$name: unauthenticated 401" || bad "$name: unauthenticated got $code"
    code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' -u "$(cat "$DIR/basic_auth")" -H "$H" "$url/v1/nodes")
    [ "$code" = 200 ] && ok "$name: curl -u 200" || bad "$name: curl -u got $code"
    code=$(curl -s --noproxy '*' -o /dev/null -w '%{http_code}' -u "$(cat "$DIR/basic_auth")x" -H "$H" "$url/v1/nodes")
    [ "$code" = 401 ] && ok "$name: wrong password 401" || bad "$name: wrong password got $code"
  fi
  "$LAB" stop-conductor "$DIR" 2
  owners=$("$LAB" owners "$DIR")
  [ "$(count "$owners" '"conductor": "127.0.0.1"')" = 20 ] && ok "$name: all on 127.0.0.1 after SIGTERM" || bad "$name: after SIGTERM: $owners"
  "$LAB" start-conductor "$DIR" 2
  # The API's ring picks the returning conductor up within hash_ring_reset_interval.
  local t
  for ((t = 0; t < 40; t++)); do
    owners=$("$LAB" owners "$DIR")
    [ "$(count "$owners" '"conductor": "127.0.0.2:8090"')" = "$c2" ] && break
    sleep 0.5
  done
  [ "$(count "$owners" '"conductor": "127.0.0.2:8090"')" = "$c2" ] && ok "$name: nodes back on 127.0.0.2:8090" || bad "$name: not back: $owners"
  "$LAB" stop-conductor "$DIR" 2 --kill
  owners=$("$LAB" owners "$DIR")
  [ "$(count "$owners" '"conductor": "127.0.0.1"')" = 20 ] && ok "$name: all on 127.0.0.1 after SIGKILL" || bad "$name: after SIGKILL: $owners"
  "$LAB" stop "$DIR"
  local left=""
  for f in "$DIR"/*.pid; do [ -e "$f" ] && left="$left $f"; done
  curl -s --noproxy '*' -o /dev/null --max-time 2 "$url/" && left="$left api"
  [ -z "$left" ] && ok "$name: nothing left running" || bad "$name: left:$left"
  DIR=
}

run noauth
run basic --basic-auth shardboot:s3cret-pw
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
