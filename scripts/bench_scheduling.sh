#!/usr/bin/env bash
# W3 drain with and without the scheduling features (docs/benchmarks.md, "Scheduling
# features and the claim path"): plain, limited (a concurrency limit that never binds),
# grouped (the jobs spread over 16 groups), both. Each run: a fresh schema, JOBS jobs
# enqueued, the queue set up, VACUUM ANALYZE, then `hopper bench --workload drain`.
# The runs of one round follow each other; ROUNDS rounds. Prints one line per run:
# "round variant jobs/s", then each round's ratios to its plain run.
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
  $H --schema "$S" bench --workload drain --json |
    sed -n 's/.*"jobs_per_sec": *\([0-9]*\).*/\1/p'
}

for r in $(seq 1 "${ROUNDS:-3}"); do
  line="round $r:"
  plain=
  for v in $VARIANTS; do
    rate=$(run "$v")
    echo "$r $v $rate"
    [ "$v" = plain ] && plain=$rate
    if [ -n "$plain" ]; then
      line="$line $v $rate ($(awk -v a="$rate" -v b="$plain" 'BEGIN { printf "%.2f", a / b }'))"
    else
      line="$line $v $rate"
    fi
  done
  echo "$line"
done
sql "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null
