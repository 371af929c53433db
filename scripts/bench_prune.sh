#!/usr/bin/env bash
# Drain throughput with and without a concurrent prune of 1,000,000 finished jobs
# (docs/benchmarks.md, "Retention"). Needs a release build and psql.
set -euo pipefail
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
H=${HOPPER_BIN:-$(dirname "$0")/../target/release/hopper}
S=${SCHEMA:-bench_prune}
N=${JOBS:-200000}
psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $S CASCADE"
$H --schema $S migrate >/dev/null
seed() {
  psql -q "$DATABASE_URL" -c "INSERT INTO $S.jobs (id, queue, kind, state, attempt, run_at, created_at, attempted_at, finished_at, duration_ms)
    SELECT (lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7' || substr(md5(i::text), 1, 19))::uuid,
           'old', 'bench', 'completed', 1, t, t, t, t + interval '5 ms', 5
    FROM (SELECT i, now() - interval '3 days' + i * interval '1 ms' AS t FROM generate_series(1, 1000000) AS i) AS s
    ON CONFLICT DO NOTHING"
}
round() {
  local with_prune=$1
  seed
  $H --schema $S bench --workload enqueue --jobs $N --json >/dev/null
  psql -q "$DATABASE_URL" -c "VACUUM ANALYZE $S.jobs"
  local old; old=$(psql -tA "$DATABASE_URL" -c "SELECT count(*) FROM $S.jobs WHERE queue = 'old'")
  if [ "$with_prune" = 1 ]; then
    ( /usr/bin/time -f "prune wall %e s" $H --schema $S --json jobs prune > ${TMPDIR:-/tmp}/hopper-bench-prune.json 2>${TMPDIR:-/tmp}/hopper-bench-prune.time ) &
    local pid=$!
  fi
  local drain; drain=$($H --schema $S bench --workload drain --concurrency 50 --json)
  if [ "$with_prune" = 1 ]; then
    local drain_done; drain_done=$(psql -tA "$DATABASE_URL" -c "SELECT count(*) FROM $S.jobs WHERE queue = 'old'")
    wait $pid
    echo "WITH PRUNE old_before=$old old_left_when_drain_ended=$drain_done drain=$drain prune=$(cat ${TMPDIR:-/tmp}/hopper-bench-prune.json | tr -d '\n ') $(cat ${TMPDIR:-/tmp}/hopper-bench-prune.time)"
  else
    echo "BASELINE old=$old drain=$drain"
  fi
  psql -q "$DATABASE_URL" -c "TRUNCATE $S.jobs"
}
for _ in $(seq 1 "${ROUNDS:-2}"); do round 0; round 1; done
psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $S CASCADE"
