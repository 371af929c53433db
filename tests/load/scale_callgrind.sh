#!/bin/bash
# The server's instructions per dispatched job with N workers connected, counted by
# callgrind: a figure that does not move with the machine's load (docs/benchmarks.md,
# "5,000 encrypted workers, indexed").
#
#   DATABASE_URL=postgres://… tests/load/scale_callgrind.sh BIN OUT [N=5000] [RATE=20] [SECONDS=10] [P=10]
#
# Runs tests/load/scale_workers.py with `hopper serve` (BIN) under callgrind, its
# instrumentation off while the N sessions connect; turns it on when the first job is in the
# table and dumps the counts when every job is completed, so OUT/cg.out.<pid>.1 holds that
# window alone (OUT/window.txt says how many jobs completed in it). Under valgrind the server
# runs on one core tens of times slower, so the rate is low and the heartbeat long (60 s):
# with the default 5 s the server could not keep up with 5,000 workers' heartbeats.
# PYTHON names an interpreter with pyzmq and cbor2 (default python3).
set -eu
bin=$1 out=$2 n=${3:-5000} rate=${4:-20} secs=${5:-10} procs=${6:-10}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
rm -f "$out"/pid "$out"/cg.out.*
cat > "$out/wrap.sh" <<WRAP
#!/bin/sh
echo \$\$ > "$out/pid"
exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.out.%p" \
    "$bin" "\$@" --heartbeat 60s --lease 300s --node-dead-after 300s
WRAP
chmod +x "$out/wrap.sh"
HOPPER_BIN="$out/wrap.sh" "${PYTHON:-python3}" "$here/scale_workers.py" \
    "$n" "$rate" "$secs" "$procs" --json > "$out/result.txt" 2>&1 &
runner=$!
while [ ! -s "$out/pid" ]; do sleep 0.2; done
pid=$(cat "$out/pid")
schema=$(tr '\0' ' ' < "/proc/$pid/cmdline" | sed 's/.*--schema \([^ ]*\).*/\1/')
total=$(python3 -c "print(int($rate * $secs))")
count() { psql "$DATABASE_URL" -XtAq -c "SELECT count(*) FROM $schema.jobs $1" 2>/dev/null || true; }
until [ "$(count '')" -gt 0 ] 2>/dev/null; do
    kill -0 $runner 2>/dev/null || break
    sleep 0.1
done
callgrind_control -i on "$pid" > /dev/null 2>&1
first=$(count "WHERE state = 'completed'")
until [ "$(count "WHERE state = 'completed'")" -ge "$total" ] 2>/dev/null; do
    kill -0 $runner 2>/dev/null || break
    sleep 0.2
done
callgrind_control -d "$pid" > /dev/null 2>&1
callgrind_control -i off "$pid" > /dev/null 2>&1
last=$(count "WHERE state = 'completed'")
wait $runner || true
echo "jobs completed in the window: $((last - first)) ($first before it, $last at its end)" \
    | tee "$out/window.txt"
grep '^summary' "$out"/cg.out.*.1
