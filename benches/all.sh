#!/usr/bin/env bash
# Every side-by-side figure in one run and one table: DHCP rate and CPU (dhcp_vs), the
# same for DHCPv6 (dhcp6_vs), the boot storm (boot_storm), members (dhcp_members), the
# shared lease store (shared_store), TFTP (tftp_bench), the HTTP boot route (http_bench)
# and QEMU time to the per-node config (qemu_boot). Each bench runs as it does alone, one after another (never two at once:
# the machine has 2 cores), and appends its rows through benches/rows.sh; the table
# printed at the end is docs/benchmarks.md's one-run table, followed by every
# figure that regressed by more than 20 % against the table committed there
# (benches/compare_rows.py). Run as root; about 15 minutes.
#
#   benches/all.sh [seconds-per-DHCP-run]      (ONLY="dhcp_vs tftp_bench" for some)
#
# Each bench's own output goes to target/bench-all/<bench>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
out="$PWD/target/bench-all"
rm -rf "$out"; mkdir -p "$out"
export SB_BENCH_ROWS="$out/rows.md"
: >"$SB_BENCH_ROWS"
: >"$SB_BENCH_ROWS.tsv"
started=$(date -u '+%Y-%m-%d %H:%M UTC')
failed=()
for bench in ${ONLY:-dhcp_vs dhcp6_vs boot_storm dhcp_members shared_store tftp_bench http_bench qemu_boot}; do
  case $bench in
    dhcp_vs | dhcp6_vs | dhcp_members | shared_store | http_bench) args=("$secs") ;;
    boot_storm) args=(60) ;;
    qemu_boot) args=(1) ;;
    *) args=() ;;
  esac
  echo "== benches/$bench.sh ${args[*]}" >&2
  if ! timeout 1800 bash "benches/$bench.sh" "${args[@]}" >"$out/$bench.log" 2>&1; then
    failed+=("$bench")
    echo "   failed; see $out/$bench.log" >&2
  fi
done
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
echo
echo "Measured $started on $(nproc) cores ($cpu), $(free -g | awk '/^Mem:/ {print $2}') GiB;"
echo "load generators on the same cores; each row from one run of its bench."
echo
echo "| figure | shardboot | reference | shardboot better by |"
echo "|---|---|---|---|"
cat "$SB_BENCH_ROWS"
# A figure more than 20 % worse than in the last run committed to docs/benchmarks.md.
echo
python3 benches/compare_rows.py docs/benchmarks.md "$SB_BENCH_ROWS.tsv" || true
if [ ${#failed[@]} -gt 0 ]; then
  echo
  echo "failed: ${failed[*]} (logs in $out)"
  exit 1
fi
