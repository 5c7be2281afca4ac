#!/usr/bin/env bash
# The nemesis, longer: the shared-store nemesis test (tests/members/shared.rs) run for
# several passes over its faults — a member cut off from the database, a member
# paused, a member back on a stale disk, split member lists, a member's wall clock two
# hours ahead and behind, the database killed mid-storm, a member killed — with the
# independent checker (tests/common/checker.rs) judging every ACK the machines saw.
# Prints the fault schedule (seconds from the start), each check's verdict, the
# figures, and where the history of every ACK, RELEASE and re-confirmation is kept
# (JSON lines). Run as root: traffic stays in the namespaces the test makes.
#
#   benches/nemesis.sh [passes]     (default 5; about 2 minutes a pass)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
passes=${1:-5}
tests/install-deps.sh
out=$(mktemp -d /tmp/sb-nemesis.XXXXXX)
history="$out/history.jsonl"
set +e
SB_NEMESIS_PASSES=$passes SB_HISTORY_LOG="$history" timeout $((passes * 600 + 600)) \
  cargo test --locked --test members -- --exact \
  shared::a_member_cut_off_paused_or_back_on_a_stale_disk_never_costs_a_duplicate_or_an_address \
  --nocapture > "$out/test.log" 2>&1
status=$?
set -e
grep -E '^(fault at|nemesis|c.s [0-9]+ machines renewed)|live machines kept|checker found|panicked' "$out/test.log" || true
echo
echo "history: $history ($(grep -c '"ack"' "$history" 2>/dev/null || echo 0) ACKs, $(grep -c '"release"' "$history" 2>/dev/null || echo 0) releases, $(grep -c '"reconfirm"' "$history" 2>/dev/null || echo 0) re-confirmations, $(grep -c '"fault"' "$history" 2>/dev/null || echo 0) fault events)"
echo "test output: $out/test.log"
exit "$status"
