"""Workers through the real server: draining, a SIGKILLed worker, a restarted server."""

import collections
import signal
import subprocess
import sys
import threading
import time
import pathlib
from concurrent.futures import ThreadPoolExecutor

from conftest import Server, counting_nap, psql, wait
from hopper_client import Client, Permanent, Snooze, Worker


def start_worker(server, handlers, concurrency=8, name=None):
    worker = Worker(server.endpoint, token=server.token, concurrency=concurrency,
                    handlers=handlers, name=name)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def test_workers_drain_every_job_exactly_once(server):
    runs = collections.Counter()
    lock = threading.Lock()

    def count(job):
        with lock:
            runs[job.id] += 1

    with Client(server.endpoint, token=server.token) as client:
        ids = client.submit_batch([{"kind": "count", "args": {"n": n}} for n in range(2000)])
    workers = [start_worker(server, {"count": count}, name=f"py{i}") for i in range(4)]
    server.wait_for(lambda c: c.get("completed") == 2000, timeout=120)
    for worker, thread in workers:
        worker.stop()
        thread.join(timeout=30)
    assert set(runs) == set(ids)
    assert all(n == 1 for n in runs.values())


def test_a_batch_runs_in_the_order_it_was_submitted(server):
    """FIFO within a priority: the jobs of one batch share their run_at, so the server runs
    them in id order, which must be the order the client submitted them in."""
    ran = []

    with Client(server.endpoint, token=server.token) as client:
        ids = client.submit_batch([{"kind": "fifo", "args": {"n": n}} for n in range(200)])
    worker, thread = start_worker(server, {"fifo": lambda job: ran.append(job.args["n"])},
                                  concurrency=1)
    server.wait_for(lambda c: c.get("completed") == 200, timeout=60)
    worker.stop()
    thread.join(timeout=30)
    assert ran == list(range(200))
    assert len(set(ids)) == 200


def test_outcomes_retry_snooze_and_permanent(server):
    seen = collections.Counter()

    def flaky(job):
        seen[job.id] += 1
        if job.args["mode"] == "permanent":
            raise Permanent("bad input")
        if job.args["mode"] == "snooze" and seen[job.id] == 1:
            raise Snooze(0.05)
        if job.args["mode"] == "retry" and seen[job.id] == 1:
            raise ValueError("first try fails")

    with Client(server.endpoint, token=server.token) as client:
        ids = {mode: client.submit("flaky", {"mode": mode}, max_attempts=3)
               for mode in ("permanent", "snooze", "retry")}
        worker, thread = start_worker(server, {"flaky": flaky})
        server.wait_for(lambda c: c.get("completed") == 2 and c.get("failed") == 1,
                        timeout=60)
        failed = client.status(ids["permanent"])
        assert failed["state"] == "failed"
        assert "bad input" in failed["errors"][0]["error"]
        retried = client.status(ids["retry"])
        assert retried["state"] == "completed"
        assert "ValueError: first try fails" in retried["errors"][0]["error"]
        assert client.status(ids["snooze"])["attempts_used"] == 1
        minutes = client.job_stats(5)
        assert sum(m["completed"] for m in minutes) == 2
        assert sum(m["failed"] for m in minutes) == 1
    worker.stop()
    thread.join(timeout=30)


def test_killed_worker_jobs_complete_elsewhere(server):
    with Client(server.endpoint, token=server.token) as client:
        client.submit_batch([{"kind": "nap", "args": {}} for _ in range(20)])
    script = pathlib.Path(__file__).with_name("worker_proc.py")
    doomed = subprocess.Popen([sys.executable, str(script), server.endpoint, server.token,
                               "3600"])
    try:
        server.wait_for(lambda c: c.get("running") == 5, timeout=60)
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
    worker, thread = start_worker(server, {"nap": lambda job: time.sleep(0.01)},
                                  concurrency=5)
    server.wait_for(lambda c: c.get("completed") == 20, timeout=60)
    worker.stop()
    thread.join(timeout=30)


def test_server_restart_loses_nothing(server):
    nap, runs = counting_nap()

    with Client(server.endpoint, token=server.token) as client:
        ids = client.submit_batch([{"kind": "nap", "args": {}} for _ in range(1500)])
    workers = [start_worker(server, {"nap": nap}, name=f"py{i}") for i in range(2)]
    server.wait_for(lambda c: c.get("completed", 0) >= 300, timeout=60)
    server.kill(signal.SIGKILL)
    time.sleep(0.5)
    server.start()
    server.wait_for(lambda c: c.get("completed") == 1500, timeout=120)
    for worker, thread in workers:
        worker.stop()
        thread.join(timeout=30)
    assert set(runs) == set(ids)


def test_server_enforces_timeouts_on_workers_that_cannot(server):
    cancelled = threading.Event()

    def hang(job):
        if job.counted_attempt == 1:
            # A Python thread cannot be stopped: the server cancels and retries the job.
            if job.cancelled.wait(timeout=20):
                cancelled.set()
            return

    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("hang", {}, timeout_ms=300)
        worker, thread = start_worker(server, {"hang": hang})
        server.wait_for(lambda c: c.get("completed") == 1, timeout=60)
        job = client.status(job_id)
    worker.stop()
    thread.join(timeout=30)
    assert cancelled.is_set()
    assert job["attempts_used"] == 2
    assert "timed out" in job["errors"][0]["error"]


def test_an_order_arriving_once_the_worker_stops_is_handed_back_unstarted():
    """An order the server sent before it read the bye is released, never run: as a held
    one, not started after the running jobs (prolonging the stop) or lost at the close."""
    from hopper_client._connection import Connection

    ran = []
    worker = Worker("tcp://127.0.0.1:1", token="t" * 16, handlers={"k": ran.append})
    worker._conn = Connection("tcp://127.0.0.1:1", token="t" * 16)  # never opened
    worker._pool = ThreadPoolExecutor(max_workers=1)
    try:
        worker.stop()
        worker._on_message({"type": "order", "job": {"id": "j", "attempt": 2, "kind": "k"}})
    finally:
        worker._pool.shutdown(wait=True)
    assert ran == [] and worker._running == {}
    assert [m for _, m in worker._unacked.values()] == [
        {"type": "released", "id": "j", "attempt": 2}]


def test_a_worker_that_reconnects_while_it_stops_says_bye_again(schema, tmp_path):
    """The restarted server forgets the session: the worker's new one must say bye too, or
    it is sent orders (a slot is free) that it hands back, again and again."""
    server = Server(schema, tmp_path, log_filter="warn,hopper_server::server=info").start()
    go = threading.Event()
    started = threading.Event()

    def slow(job):
        started.set()
        go.wait(30)

    try:
        with Client(server.endpoint, token=server.token) as client:
            client.submit("slow", {})
            worker, thread = start_worker(server, {"slow": slow}, concurrency=2)
            assert started.wait(30)
            worker.stop()
            server.kill()
            server.start()
            wait(lambda: "peer said bye" in server.log.read_text(),
                 what="the worker's bye to the new server")
            # So the new session gets no order: this job stays untouched.
            later = client.submit("slow", {})
            go.set()
            thread.join(timeout=30)
            assert not thread.is_alive()
            assert client.status(later)["state"] == "available"
        assert psql(f"SELECT attempt FROM {schema}.jobs WHERE id = '{later}'") == "0"
    finally:
        go.set()
        server.kill(signal.SIGTERM)


def test_an_idle_worker_stops_once_its_bye_is_acknowledged(schema, tmp_path):
    """A bye closed away unread (the socket does not linger) leaves the server to take the
    close for a vanished worker's, whose orders' attempts count: the stop waits for the
    bye's acknowledgement, so the server has read it."""
    log_filter = "warn,hopper_server::server=info,hopper_server::dispatch=info"
    server = Server(schema, tmp_path, log_filter=log_filter).start()

    def lines():
        return [line for line in server.log.read_text().splitlines() if " name=idle " in line]

    try:
        worker, thread = start_worker(server, {}, name="idle")
        wait(lambda: any("peer said hello" in line for line in lines()), what="the hello")
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert any("peer said bye" in line for line in lines()), lines()
        ends = ("left after bye", "connection closed", "went silent")
        wait(lambda: any(end in line for line in lines() for end in ends),
             what="the end of the worker's session")
        ended = [line for line in lines() if any(end in line for end in ends)]
        assert "peer left after bye" in ended[0], ended
    finally:
        server.kill(signal.SIGTERM)


def test_a_stop_waits_for_the_bye_at_most_ack_timeout(schema, tmp_path):
    server = Server(schema, tmp_path, log_filter="warn,hopper_server::server=info").start()
    worker = Worker(server.endpoint, token=server.token, name="orphan", ack_timeout=0.3)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait(lambda: "peer said hello" in server.log.read_text(), what="the hello")
    finally:
        server.kill()
    stopped = time.monotonic()
    worker.stop()
    thread.join(timeout=30)
    waited = time.monotonic() - stopped
    assert not thread.is_alive()
    assert 0.25 <= waited < 5, waited


def test_prefetched_orders_are_held_and_handed_back_unstarted(server):
    """With `prefetch`, orders beyond the concurrency are held (twice the concurrency before
    any job finished); the ones not started when the worker stops go back untouched."""
    go = threading.Event()
    started = []

    def slow(job):
        started.append(job.id)
        go.wait(30)

    with Client(server.endpoint, token=server.token) as client:
        client.submit_batch([{"kind": "slow", "args": {"n": n}} for n in range(10)])
    worker = Worker(server.endpoint, token=server.token, concurrency=1, prefetch=5,
                    handlers={"slow": slow})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    # One running, two held: 1 + twice the concurrency. The counts say the server claimed
    # them, which it does before it sends their orders: a worker stopped before the first one
    # arrived would hand them all back. So the first one started, too.
    server.wait_for(lambda c: c.get("running") == 3 and c.get("available") == 7
                    and len(started) == 1)
    worker.stop()
    # The two held orders go back at once (any still on the wire as they arrive), while the
    # started one still runs.
    server.wait_for(lambda c: c.get("running") == 1 and c.get("available") == 9)
    go.set()
    thread.join(timeout=30)
    counts = server.wait_for(lambda c: c.get("completed") == 1)
    assert counts.get("available") == 9
    assert len(started) == 1
    attempts = psql(f"SELECT count(*) FROM {server.schema}.jobs "
                    "WHERE state = 'available' AND attempt - uncounted > 0")
    assert attempts == "0", "released orders used no attempt"
