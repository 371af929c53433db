#!/usr/bin/env bash
# W3 drain with and without the scheduling features (docs/benchmarks.md, "Scheduling
# features and the claim path"): plain, limited (a concurrency limit that never binds),
# grouped (the jobs spread over 16 groups), both. Each run: a fresh schema, JOBS jobs
# enqueued, the queue set up, VACUUM ANALYZE, then `hopper bench --workload drain`.
# The runs of one round follow each other; ROUNDS rounds (default 3). Prints one line per
# run: "round variant jobs/s", then each round's figures with their ratio to its plain run.
# DRAIN_ARGS: extra arguments for the drain (e.g. "--prefetch 2000"), for tuning runs.
# Needs a release build (cargo build --release -p hopper-cli) and psql.
set -euo pipefail
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
H=${HOPPER_BIN:-$(dirname "$0")/../target/release/hopper}
S=${SCHEMA:-bench_sched}
N=${JOBS:-20000}
G=${NGROUPS:-16}
VARIANTS=${VARIANTS:-plain limited grouped both}
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
sql() { psql -qtA -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "$1"; }

run() {
  local variant=$1
  sql "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null
  $H --schema "$S" migrate >/dev/null
  $H --schema "$S" bench --workload enqueue --jobs "$N" --json >/dev/null
  case $variant in
    grouped | both)
      # Round-robin over the groups in enqueue order, then mark the queue grouped (as the
      # first insert with a group would have).
      sql "UPDATE $S.jobs AS j SET group_key = 'g' || (s.rn % $G)
           FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM $S.jobs) AS s
           WHERE s.id = j.id" >/dev/null
      sql "SELECT $S.mark_grouped(ARRAY['bench'])" >/dev/null ;;
  esac
  case $variant in
    limited | both) $H --schema "$S" queues limit bench --concurrency 10000 >/dev/null ;;
  esac
  sql "VACUUM ANALYZE $S.jobs" >/dev/null
  # shellcheck disable=SC2086 # DRAIN_ARGS is a list of arguments
  $H --schema "$S" bench --workload drain --json ${DRAIN_ARGS:-} |
    sed -n 's/.*"jobs_per_sec": *\([0-9]*\).*/\1/p'
}

# Odd rounds run the variants in the order given, even rounds in reverse, so a drift of
# the machine's load within a round does not always favour the same variant.
for r in $(seq 1 "${ROUNDS:-3}"); do
  order=$VARIANTS
  if [ $((r % 2)) = 0 ]; then order=$(echo "$VARIANTS" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  declare -A rate=()
  for v in $order; do
    rate[$v]=$(run "$v")
    echo "$r $v ${rate[$v]}"
  done
  line="round $r:"
  for v in $VARIANTS; do
    line="$line $v ${rate[$v]}"
    if [ -n "${rate[plain]:-}" ]; then
      line="$line ($(awk -v a="${rate[$v]}" -v b="${rate[plain]}" 'BEGIN { printf "%.2f", a / b }'))"
    fi
  done
  echo "$line"
  unset rate
done
sql "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null
