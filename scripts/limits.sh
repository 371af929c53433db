#!/usr/bin/env bash
# The PostgreSQL limits L0–L3 of shared/BENCHMARK.md, measured with pgbench on a bare job
# table the way bench-peers/harness.py measures them, so hopper's figures can be set beside
# them from the same run (docs/benchmarks.md).
#
#   L0  one-row INSERT per transaction, 1 client              (the ceiling for W2)
#   L1  INSERT … SELECT generate_series(1, 1000), 1 and 4 clients (the ceiling for W1)
#   L2  claim 100 by DELETE … SKIP LOCKED, 4 clients, 1M rows  (at-most-once claim)
#   L3  claim 100 by UPDATE … SKIP LOCKED, then complete them by a second UPDATE,
#       4 clients, 1M rows                                      (at-least-once: the W3 reference)
#
# Usage: scripts/limits.sh [L0,L1,L2,L3]
# Connection: the usual libpq variables (PGHOST, PGPORT, PGUSER, PGPASSWORD); defaults
# 127.0.0.1 and postgres. LIMITS_DB names the scratch database (default hopper_limits; it is
# dropped and created anew, and dropped at the end). LIMIT_T is the seconds per pgbench run
# (default 10, as in harness.py).
# Output: one line per figure, "<name> <clients> <rows/s> rows/s".
set -euo pipefail

which="${1:-L0,L1,L2,L3}"
export PGHOST="${PGHOST:-127.0.0.1}" PGUSER="${PGUSER:-postgres}"
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
db="${LIMITS_DB:-hopper_limits}"
seconds="${LIMIT_T:-10}"
work="$(mktemp -d)"

cleanup() {
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 -d "$db" "$@"; }

# The LIMIT table of harness.py: an identity key, a claim index on the available jobs.
psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\""
sql <<'EOF'
CREATE TABLE jobs (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue    text NOT NULL,
    payload  jsonb NOT NULL,
    state    smallint NOT NULL DEFAULT 0,
    run_at   timestamptz NOT NULL DEFAULT now(),
    attempts int NOT NULL DEFAULT 0
);
CREATE INDEX jobs_claim ON jobs (queue, run_at, id) WHERE state = 0;
EOF

cat >"$work/l0.sql" <<'EOF'
INSERT INTO jobs (queue, payload) VALUES ('default', jsonb_build_object('n', 1));
EOF
cat >"$work/l1.sql" <<'EOF'
INSERT INTO jobs (queue, payload, state, run_at, attempts)
SELECT 'default', jsonb_build_object('n', g), 0, now(), 0 FROM generate_series(1, 1000) g;
EOF
# pgbench reads one SQL command per line (a trailing backslash does not continue a line).
cat >"$work/l2.sql" <<'EOF'
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE queue = 'default' AND state = 0 AND run_at <= now() ORDER BY run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED);
EOF
cat >"$work/l3.sql" <<'EOF'
WITH c AS (UPDATE jobs SET state = 1, attempts = attempts + 1 WHERE id IN (SELECT id FROM jobs WHERE queue = 'default' AND state = 0 AND run_at <= now() ORDER BY run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id) SELECT coalesce(array_agg(id), '{}')::text AS ids FROM c \gset
UPDATE jobs SET state = 2 WHERE id = ANY(:ids::bigint[]);
EOF

# pgbench SCRIPT CLIENTS: prints the transactions per second.
pgbench_tps() {
    local clients="$2" threads=$(($2 < 2 ? $2 : 2))
    pgbench -n -M prepared -c "$clients" -j "$threads" -T "$seconds" -f "$work/$1" "$db" \
        >"$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
    sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/out"
}

# report NAME CLIENTS TPS ROWS_PER_TRANSACTION
report() {
    awk -v n="$1" -v c="$2" -v t="$3" -v r="$4" 'BEGIN { printf "%-30s %-9s %12.1f rows/s\n", n, c, t * r }'
}

prefill() {
    sql -c "TRUNCATE jobs" \
        -c "INSERT INTO jobs (queue, payload) SELECT 'default', jsonb_build_object('n', g) FROM generate_series(1, 1000000) g" \
        -c "VACUUM ANALYZE jobs"
}

if [[ ",$which," == *",L0,"* ]]; then
    report L0_single_insert_1 1client "$(pgbench_tps l0.sql 1)" 1
fi
if [[ ",$which," == *",L1,"* ]]; then
    for clients in 1 4; do
        sql -c "TRUNCATE jobs"
        report L1_batch_insert_1000 "${clients}client$([[ $clients == 1 ]] || echo s)" \
            "$(pgbench_tps l1.sql "$clients")" 1000
    done
fi
if [[ ",$which," == *",L2,"* ]]; then
    prefill
    report L2_claim_delete_100 4clients "$(pgbench_tps l2.sql 4)" 100
fi
if [[ ",$which," == *",L3,"* ]]; then
    prefill
    report L3_claim_update_complete_100 4clients "$(pgbench_tps l3.sql 4)" 100
fi
