#!/usr/bin/env bash
# W3 of several builds or configurations side by side, in shuffled rounds, for ratios that
# the machine's drift cannot bias (docs/benchmarks.md, session 14). Needs psql and
# /usr/bin/time (Debian's `time` package).
#
#   scripts/w3_ab.sh ROUNDS OUT CONFIG...
#   CONFIG: NAME=BINARY[,VAR=VALUE...]   (values without commas or spaces)
#
# e.g. scripts/w3_ab.sh 20 /tmp/w3.txt P=/tmp/hopper-plain \
#        X=/tmp/hopper-otel,OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4319
#
# Every configuration uses the one schema $SCHEMA (default bench_ab, migrated here), so no
# configuration has tables of its own. Each round runs every configuration once, in an
# order shuffled anew: TRUNCATE, W1 (100,000 jobs) with that configuration's binary and
# environment (so its jobs carry what it writes on enqueue), VACUUM ANALYZE and CHECKPOINT,
# then W3 under /usr/bin/time; or, with DRAIN=server-drain, W7 (the drain through an
# in-process server by four worker processes) instead of W3. Appends to OUT one line per run:
# `round name jobs_per_sec user_seconds system_seconds max_rss_kb`. Then summarise with
# scripts/w3_ab_summary.py OUT.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,19p' "$0"; exit 2; }
rounds=$1 out=$2; shift 2
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
schema=${SCHEMA:-bench_ab}
drain=${DRAIN:-drain}
configs=("$@")
first=${configs[0]#*=}
"${first%%,*}" --schema "$schema" migrate >/dev/null

# One W3 run of CONFIG in round $1.
run() {
  local round=$1 name=${2%%=*} spec=${2#*=}
  local bin=${spec%%,*} vars=()
  [ "$spec" != "$bin" ] && IFS=, read -r -a vars <<<"${spec#*,}"
  psql -q "$DATABASE_URL" -c "TRUNCATE $schema.jobs, $schema.job_logs" >/dev/null
  env "${vars[@]}" "$bin" --schema "$schema" --json bench --workload enqueue >/dev/null 2>&1
  psql -q "$DATABASE_URL" -c "VACUUM ANALYZE $schema.jobs" -c "CHECKPOINT" >/dev/null
  local report
  # A failed drain is reported below with its output, not by `set -e` without a word.
  report=$(env "${vars[@]}" /usr/bin/time -f "TIME %U %S %M" \
    "$bin" --schema "$schema" --json bench --workload "$drain" 2>&1) || true
  local rate times
  rate=$(grep -o '"jobs_per_sec":[0-9.]*' <<<"$report" | head -1 | cut -d: -f2) || true
  times=$(grep '^TIME' <<<"$report" | cut -d' ' -f2-) || true
  [ -n "$rate" ] || { echo "$name: no $drain figure in: $report" >&2; exit 1; }
  echo "$round $name $rate $times" | tee -a "$out"
}

for round in $(seq 1 "$rounds"); do
  for config in $(printf '%s\n' "${configs[@]}" | shuf); do
    run "$round" "$config"
  done
done
