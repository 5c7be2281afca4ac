# Sourced by the side-by-side benches: `row` appends one markdown table row to the file
# named by SB_BENCH_ROWS (set by benches/all.sh), so one command prints every figure in
# one table. Without SB_BENCH_ROWS it does nothing.
#
#   row WHAT SHARDBOOT REFERENCE REFERENCE_NAME higher|lower [UNIT]
#
# The ratio says how many times better shardboot is: SHARDBOOT / REFERENCE when higher
# is better (a rate), REFERENCE / SHARDBOOT when lower is (seconds, CPU). Each row is
# also written, with which way is better, to SB_BENCH_ROWS.tsv, from which
# benches/compare_rows.py flags a figure that regressed against the committed run.
row() {
  [ -n "${SB_BENCH_ROWS:-}" ] || return 0
  local what=$1 sb=$2 ref=$3 name=$4 better=$5 unit=${6:-} r
  r=$(awk -v s="$sb" -v f="$ref" -v b="$better" 'BEGIN {
    if (s !~ /^[0-9.]+$/ || f !~ /^[0-9.]+$/ || s == 0 || f == 0) { print "n/a"; exit }
    printf "%.1f×", (b == "higher") ? s / f : f / s }')
  printf '| %s | %s%s | %s%s (%s) | %s |\n' "$what" "$sb" "$unit" "$ref" "$unit" "$name" "$r" >>"$SB_BENCH_ROWS"
  printf '%s\t%s\t%s\n' "$what" "$sb" "$better" >>"$SB_BENCH_ROWS.tsv"
}
