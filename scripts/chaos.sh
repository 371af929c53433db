#!/usr/bin/env bash
# The reliability harness (crates/hopper-chaos, docs/reliability.md), built for release
# together with the `hopper` binary it serves with, then run with the given arguments:
#
#   scripts/chaos.sh chaos --profile long            # 100,000 jobs, kills, a database restart
#   scripts/chaos.sh pinned-xmin --rate 1000         # 2 min load, 5 min pinned, 3 min after
#   scripts/chaos.sh soak --rate 1000                # 30 min at a fixed rate
#
# DATABASE_URL names the PostgreSQL server (each run creates and drops a database of its
# own). `chaos` restarts PostgreSQL with --pg-restart (default: the 15/main cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p hopper-cli -p hopper-chaos
exec target/release/hopper-chaos "$@"
