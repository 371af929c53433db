#!/usr/bin/env bash
# A shorter side-by-side than bench-peers/run_side_by_side.sh: the PostgreSQL limits, hopper,
# graphile-worker tuned and awa tuned (the best peers of the full runs, for W3 and W1), 3
# repetitions each, one after the other, into $RESULTS_DIR; then the table and hopper's
# ratios. For a second look when a full run (23 minutes) met a noisy machine; it reports
# beside the full run, never instead of it (docs/benchmarks.md).
#
# Usage: BENCH_PEERS=/tmp/bench-peers RESULTS_DIR=/tmp/sbs scripts/side_by_side_subset.sh
#   BENCH_PEERS: a copy of ../shared/bench-peers where run_side_by_side.sh has run once (its
#   venv, Node packages and Rust peers in place). Needs target/release/hopper-bench-peer.
set -euo pipefail
adapter=$(readlink -f "$(dirname "$0")/../bench/peer/adapter.json")
: "${BENCH_PEERS:?set BENCH_PEERS to a prepared copy of bench-peers}"
: "${RESULTS_DIR:?set RESULTS_DIR to a new folder}"
mkdir -p "$RESULTS_DIR"
export RESULTS_DIR
export PROJECT_ADAPTER="$adapter"
cd "$BENCH_PEERS"
H="venv/bin/python harness.py"
$H limit --reps 3
DRAIN_TIMEOUT_S=300 $H system hopper --variant default --reps 3
DRAIN_TIMEOUT_S=300 $H system graphile-worker --variant tuned --reps 3
DRAIN_TIMEOUT_S=300 $H system awa --variant tuned --reps 3
$H table | tee "$RESULTS_DIR/table.md"
$H compare hopper | tee "$RESULTS_DIR/compare.md"
