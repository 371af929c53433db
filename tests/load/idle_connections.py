"""Measures what idle TCP connections cost `hopper serve` (issue 16, "Done when").

Starts `hopper serve` on a loopback port with a fresh schema, then in waves opens N TCP
connections that never speak, holds them until the server closes them (its handshake
deadline), and opens them again. Meanwhile a well-behaved client submits a job and reads
its status in a loop. Prints the client's latency (before and during), the server's peak
RSS, how many idle connections the server closed, and the size of its log.

    HOPPER_BIN=target/release/hopper DATABASE_URL=postgres://… \
        python3 tests/load/idle_connections.py [N] [WAVES]

Loopback only; stops by itself.
"""
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
from hopper_client import Client  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def round_trips(client, n):
    times = []
    for i in range(n):
        started = time.perf_counter()
        job = client.submit("polite", {"n": i})
        client.status(job)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)], times[-1]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    waves = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workdir = tempfile.mkdtemp(prefix="hopper-idle-")
    log_path = os.path.join(workdir, "serve.log")
    schema = "idle_" + uuid.uuid4().hex[:8]
    port = 20000 + os.getpid() % 20000
    endpoint = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, HOPPER_LOG="info", NO_COLOR="1")
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [os.environ["HOPPER_BIN"], "--schema", schema, "serve", "--listen", endpoint,
             "--token-file", os.path.join(workdir, "serve.token")],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        token_file = os.path.join(workdir, "serve.token")
        deadline = time.time() + 60
        while time.time() < deadline:
            if os.path.exists(token_file) and "listening on" in open(log_path).read():
                break
            time.sleep(0.1)
        token = [l for l in open(token_file).read().splitlines() if l and not l.startswith("#")][0]
        client = Client(endpoint, token=token)
        before = round_trips(client, 200)
        peak = rss_kib(server.pid)
        stop = threading.Event()

        def sample():
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, rss_kib(server.pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        during = []
        closed = 0
        opened = 0
        for _ in range(waves):
            idle = []
            for _ in range(n):
                idle.append(socket.create_connection(("127.0.0.1", port)))
            opened += len(idle)
            during.append(round_trips(client, 200))
            for s in idle:
                s.settimeout(30)
                try:
                    if s.recv(1 << 16) == b"" or s.recv(1 << 16) == b"":
                        closed += 1
                except OSError:
                    closed += 1
                s.close()
        stop.set()
        sampler.join()
        after = round_trips(client, 200)
        client.close()
        print(f"idle connections opened: {opened} ({waves} waves of {n}); closed by the server: {closed}")
        print(f"client submit+status p50/p99/max ms: before {before[0]:.2f}/{before[1]:.2f}/{before[2]:.2f}")
        for i, d in enumerate(during):
            print(f"  during wave {i + 1}: {d[0]:.2f}/{d[1]:.2f}/{d[2]:.2f}")
        print(f"  after: {after[0]:.2f}/{after[1]:.2f}/{after[2]:.2f}")
        print(f"server peak RSS: {peak / 1024:.1f} MiB")
    finally:
        server.terminate()
        server.wait(timeout=30)
        subprocess.run(["psql", os.environ["DATABASE_URL"], "-qc", f"DROP SCHEMA {schema} CASCADE"],
                       capture_output=True)
    print(f"server log: {os.path.getsize(log_path)} bytes")
    with open(log_path) as f:
        lines = f.read().splitlines()
    for line in lines[-8:]:
        print("  | " + line[:200])


if __name__ == "__main__":
    main()
