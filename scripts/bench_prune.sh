#!/usr/bin/env bash
# Drain throughput with and without a concurrent prune of 1,000,000 finished jobs
# (docs/benchmarks.md, "Retention"). Needs a release build and psql.
#
# Each round seeds 1,000,000 completed jobs three days old, enqueues $JOBS bench jobs and
# drains them (`hopper bench --workload drain`, concurrency 50); in a "prune" round
# `hopper jobs prune` starts at the same moment as the drain. Rounds run in pairs, in the
# order A B B A (A = drain alone, B = drain while pruning) repeated $PAIRS/2 times, so a
# load that drifts during the run weighs on both sides alike. One line per round, then the
# ratio of each pair and their median.
set -euo pipefail
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
H=${HOPPER_BIN:-$(dirname "$0")/../target/release/hopper}
S=${SCHEMA:-bench_prune}
N=${JOBS:-200000}
PAIRS=${PAIRS:-4}
psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $S CASCADE" 2>/dev/null
$H --schema $S migrate >/dev/null
seed() {
  psql -q "$DATABASE_URL" -c "INSERT INTO $S.jobs (id, queue, kind, state, attempt, run_at, created_at, attempted_at, finished_at, duration_ms)
    SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7' || substr(md5(i::text), 1, 19))::uuid,
           'old', 'bench', 'completed', 1, t, t, t, t + interval '5 ms', 5
    FROM (SELECT i, now() - interval '3 days' + i * interval '1 ms' AS t FROM generate_series(1, 1000000) AS i) AS s
    ON CONFLICT DO NOTHING"
}
# Autovacuum runs on the jobs table so far (pruning makes them come sooner).
autovacuums() {
  psql -tA "$DATABASE_URL" -c "SELECT autovacuum_count FROM pg_stat_user_tables WHERE schemaname = '$S' AND relname = 'jobs'"
}
jobs_per_sec() { sed -n 's/.*"jobs_per_sec":\([0-9.]*\).*/\1/p'; }
# One round; prints "alone <jobs/s>" or "prune <jobs/s> ...", and the jobs/s alone on fd 3.
round() {
  local with_prune=$1
  seed
  $H --schema $S bench --workload enqueue --jobs "$N" --json >/dev/null
  psql -q "$DATABASE_URL" -c "VACUUM ANALYZE $S.jobs"
  local pid=
  if [ "$with_prune" = 1 ]; then
    $H --schema $S --json jobs prune >/dev/null 2>&1 &
    pid=$!
  fi
  local started drain rate vacuums
  vacuums=$(autovacuums)
  started=$(date +%s.%N)
  drain=$($H --schema $S bench --workload drain --concurrency 50 --json)
  rate=$(printf '%s' "$drain" | jobs_per_sec)
  if [ -n "$pid" ]; then
    # The prune must still be running when the drain ends (it was then at work during the
    # whole drain); it is stopped there, since what it does afterwards does not count.
    local left; left=$(psql -tA "$DATABASE_URL" -c "SELECT count(*) FROM $S.jobs WHERE queue = 'old'")
    local running=no; kill -0 "$pid" 2>/dev/null && running=yes
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    local secs; secs=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    echo "prune  drain $rate jobs/s; pruned during the drain: $((1000000 - left)) rows in ${secs} s; prune still running at the end: $running; autovacuums during the drain: $(($(autovacuums) - vacuums)); load $(cut -d" " -f1 /proc/loadavg)" >&2
  else
    echo "alone  drain $rate jobs/s; autovacuums during the drain: $(($(autovacuums) - vacuums)); load $(cut -d" " -f1 /proc/loadavg)" >&2
  fi
  echo "$rate"
  psql -q "$DATABASE_URL" -c "TRUNCATE $S.jobs"
}
ratios=()
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then a=$(round 0); b=$(round 1); else b=$(round 1); a=$(round 0); fi
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
  echo "pair $i: alone $a, while pruning $b jobs/s: ratio $ratio" >&2
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ r[NR] = $1 } END {
  m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
  printf "median ratio (while pruning / alone) over %d pairs: %.3f\n", NR, m }' >&2
psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $S CASCADE"
