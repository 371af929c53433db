"""5,000 encrypted workers on one `hopper serve` (issue 19, "Done when").

Starts `hopper serve --curve` on a loopback port with a fresh schema, a pool of
`--pool-size` connections and an `application_name` of its own, then connects N worker
sessions over CURVE from P child processes (each one asyncio loop holding N/P DEALER
sockets, each socket its own key pair and its own `hello` as a worker of concurrency 1,
heartbeating every `heartbeat_ms` as the protocol asks). With every session connected it
submits jobs one at a time at RATE per second for SECONDS through one more CURVE client,
each job carrying its submit time; the worker that gets the order records how long after
it arrived, and completes it at once. While the jobs run it samples the server's database
connections (rows of `pg_stat_activity` with its `application_name`) and RSS.

    HOPPER_BIN=target/release/hopper DATABASE_URL=postgres://… \
        python3 tests/load/scale_workers.py [N=5000] [RATE=200] [SECONDS=20] [P=10]

The same test from one Rust process, at a sixth of a core, with the latency split at the
submit's reply: `cargo run --release -p hopper-server --example scale_workers`
(crates/hopper-server/examples/scale_workers.rs). This script stays as the cross-language
check (pyzmq's libzmq and CURVE, cbor2's encoding, the Python client's submit).

Prints the figures docs/benchmarks.md records ("5,000 encrypted workers"); also as one JSON
line with `--json`. Loopback only; stops by itself. Raises its own `ulimit -n` to the hard
limit (the server inherits it): N sessions need N descriptors in the server and about 2N
in the children.
"""
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import cbor2
import zmq
import zmq.asyncio

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
from hopper_client import Client  # noqa: E402

APP = "hopper_scale_serve"
KIND = "scale"


# -- the worker children ----------------------------------------------------------------
async def session(ctx, endpoint, token, server_key, name, latencies, stats, connected):
    """One worker session: hello, then answer orders and heartbeat until cancelled."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    public, secret = zmq.curve_keypair()
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.connect(endpoint)
    req = 1
    hello = {"type": "hello", "req": req, "version": 1, "role": "worker", "token": token,
             "name": name, "kinds": [KIND], "queues": ["default"], "concurrency": 1}
    # A hello that is not answered (its connection was closed before the handshake ended,
    # the server being busy with thousands of others) is said again, as the protocol asks.
    while True:
        await sock.send(cbor2.dumps(hello))
        if await sock.poll(10_000):
            welcome = cbor2.loads(await sock.recv())
            if welcome.get("type") == "welcome":
                break
            raise RuntimeError(f"{name}: {welcome}")
        stats["hello_again"] += 1
    period = welcome["heartbeat_ms"] / 1000
    connected()

    async def heartbeat():
        nonlocal req
        # Spread the sessions' heartbeats over the period.
        await asyncio.sleep(period * (hash(name) % 1000) / 1000)
        while True:
            req += 1
            # An order is completed as soon as it arrives: no lease is held between beats.
            await sock.send(cbor2.dumps({"type": "heartbeat", "req": req, "leases": []}))
            await asyncio.sleep(period * 0.8)

    beat = asyncio.ensure_future(heartbeat())
    try:
        while True:
            message = cbor2.loads(await sock.recv())
            kind = message.get("type")
            if kind == "order":
                job = message["job"]
                latencies.append((time.time() - job["args"]["t"]) * 1000)
                req += 1
                await sock.send(cbor2.dumps({"type": "completed", "req": req, "id": job["id"],
                                             "attempt": job["attempt"], "duration_ms": 0}))
            elif kind == "error" and message.get("code") == "unauthorized":
                # The server ended the session (it heard nothing for three periods): the
                # protocol's cue to say hello again. Counted: it should not happen.
                stats["session_lost"] += 1
                req += 1
                await sock.send(cbor2.dumps(dict(hello, req=req)))
            elif kind == "error":
                raise RuntimeError(f"{name}: {message}")
    finally:
        beat.cancel()
        sock.close(0)


async def child_main(endpoint, token, server_key, first, count):
    ctx = zmq.asyncio.Context()
    ctx.set(zmq.MAX_SOCKETS, count + 64)
    latencies = []
    stats = {"hello_again": 0, "session_lost": 0}
    up = 0

    def connected():
        nonlocal up
        up += 1
        if up % 250 == 0 or up == count:
            print(f"connected {up}", flush=True)

    tasks = []
    for i in range(first, first + count):
        tasks.append(asyncio.ensure_future(
            session(ctx, endpoint, token, server_key.encode(), f"scale-{i}", latencies, stats,
                    connected)))
        if i % 50 == 0:
            await asyncio.sleep(0.05)  # a steady stream of CURVE handshakes, not one burst
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), lambda: stop.done() or stop.set_result(None))
    done, _ = await asyncio.wait(tasks + [stop], return_when=asyncio.FIRST_COMPLETED)
    for t in done:
        if t is not stop and t.exception():
            print(f"failed {t.exception()}", flush=True)
    for t in tasks:
        t.cancel()
    print("latencies " + json.dumps({"latencies": latencies, **stats}), flush=True)


# -- the parent -------------------------------------------------------------------------
def rss_kib(pid, field="VmRSS:"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def psql(url, sql):
    out = subprocess.run(["psql", url, "-XtAq", "-c", sql], capture_output=True, text=True)
    return out.stdout.strip()


def percentile(values, p):
    return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    as_json = "--json" in sys.argv
    n = int(args[0]) if len(args) > 0 else 5000
    rate = float(args[1]) if len(args) > 1 else 200.0
    seconds = float(args[2]) if len(args) > 2 else 20.0
    procs = int(args[3]) if len(args) > 3 else 10
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    database_url = os.environ["DATABASE_URL"]
    sep = "&" if "?" in database_url else "?"
    server_url = f"{database_url}{sep}application_name={APP}"
    workdir = tempfile.mkdtemp(prefix="hopper-scale-")
    log_path = os.path.join(workdir, "serve.log")
    token_file = os.path.join(workdir, "serve.token")
    schema = "scale_" + uuid.uuid4().hex[:8]
    port = 20000 + os.getpid() % 20000
    endpoint = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, HOPPER_LOG=os.environ.get("HOPPER_LOG", "warn"), NO_COLOR="1",
               DATABASE_URL=server_url)
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [os.environ["HOPPER_BIN"], "--schema", schema, "serve", "--listen", endpoint,
             "--curve", "--token-file", token_file, "--pool-size", "8"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    children = []
    try:
        deadline = time.time() + 60
        key = None
        while time.time() < deadline and key is None:
            text = open(log_path).read()
            if "peers need the server key " in text:
                key = text.split("peers need the server key ")[1].split()[0]
            elif server.poll() is not None:
                raise RuntimeError(text)
            time.sleep(0.1)
        token = [l for l in open(token_file).read().splitlines() if l and not l.startswith("#")][0]
        idle_rss = rss_kib(server.pid)

        # Connect the workers.
        started = time.monotonic()
        per = n // procs
        for p in range(procs):
            count = per if p < procs - 1 else n - per * (procs - 1)
            children.append(subprocess.Popen(
                [sys.executable, __file__, "--child", endpoint, token, key, str(p * per),
                 str(count)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        up = [0] * procs

        def follow(i, child):
            for line in child.stdout:
                if line.startswith("connected "):
                    up[i] = int(line.split()[1])
                elif line.startswith("failed"):
                    print(f"child {i}: {line.strip()}", file=sys.stderr)
                elif line.startswith("latencies "):
                    results[i] = json.loads(line[len("latencies "):])
                    return

        results = [None] * procs
        readers = [threading.Thread(target=follow, args=(i, c)) for i, c in enumerate(children)]
        for r in readers:
            r.start()
        deadline = time.monotonic() + 300
        while sum(up) < n:
            if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                raise RuntimeError(f"only {sum(up)} of {n} sessions connected")
            time.sleep(0.2)
        connect_s = time.monotonic() - started
        connected_rss = rss_kib(server.pid)

        # Sample the database connections and RSS while the jobs run.
        conns = []
        peak = [connected_rss]
        stop = threading.Event()
        count_sql = f"SELECT count(*) FROM pg_stat_activity WHERE application_name = '{APP}'"

        def sample():
            while not stop.is_set():
                conns.append(int(psql(database_url, count_sql) or 0))
                peak[0] = max(peak[0], rss_kib(server.pid))
                stop.wait(0.5)

        sampler = threading.Thread(target=sample)
        sampler.start()
        load_before = os.getloadavg()
        jobs = int(rate * seconds)
        with Client(endpoint, token=token, server_key=key, timeout=30) as client:
            began = time.monotonic()
            for i in range(jobs):
                due = began + i / rate
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                client.submit(KIND, {"t": time.time(), "n": i})
            submitted_s = time.monotonic() - began
            deadline = time.monotonic() + 120
            done = 0
            while time.monotonic() < deadline:
                stats = {s["queue"]: s for s in client.queue_stats()}
                done = stats.get("default", {}).get("completed", 0)
                if done >= jobs:
                    break
                time.sleep(0.2)
        load_after = os.getloadavg()
        stop.set()
        sampler.join()
        cpu = [int(x) for x in open(f"/proc/{server.pid}/stat").read().split(")")[1].split()[11:13]]
        for c in children:
            c.stdin.close()
        for r in readers:
            r.join(timeout=60)
        latencies = sorted(x for res in results if res for x in res["latencies"])
        hello_again = sum(res["hello_again"] for res in results if res)
        session_lost = sum(res["session_lost"] for res in results if res)
        figures = {
            "workers": n, "processes": procs, "rate": rate, "jobs": jobs, "completed": done,
            "connect_s": round(connect_s, 1), "submit_s": round(submitted_s, 1),
            "db_connections_max": max(conns) if conns else None,
            "db_connections_samples": len(conns),
            "rss_idle_mib": round(idle_rss / 1024, 1),
            "rss_connected_mib": round(connected_rss / 1024, 1),
            "rss_peak_mib": round(peak[0] / 1024, 1),
            "rss_hwm_mib": round(rss_kib(server.pid, "VmHWM:") / 1024, 1),
            "server_cpu_s": round(sum(cpu) / os.sysconf("SC_CLK_TCK"), 1),
            "latencies": len(latencies), "hello_again": hello_again,
            "session_lost": session_lost,
            "p50_ms": round(percentile(latencies, 0.5), 2),
            "p99_ms": round(percentile(latencies, 0.99), 2),
            "max_ms": round(latencies[-1], 2) if latencies else None,
            "load_before": load_before, "load_after": load_after,
        }
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
        server.terminate()
        server.wait(timeout=30)
        psql(database_url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    if as_json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(f"{k}: {v}")
    print(f"server log: {os.path.getsize(log_path)} bytes")
    with open(log_path) as f:
        for line in f.read().splitlines()[-8:]:
            print("  | " + line[:200])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        endpoint, token, key, first, count = sys.argv[2:7]
        asyncio.run(child_main(endpoint, token, key, int(first), int(count)))
    else:
        main()
