"""Job metadata and per-job logs through the real server: submitted meta reaches the worker's
job object, and what a handler logs is stored with the attempt (a flood truncated, never
failing the job)."""

import json
import pathlib
import signal
import subprocess
import sys
import threading
import time

from conftest import psql
from hopper_client import Client, HopperError, Worker

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def logs_of(server, job_id):
    rows = psql(
        f"SELECT coalesce(json_agg(json_build_object('attempt', attempt, 'lines', lines,"
        f" 'dropped', dropped) ORDER BY attempt), '[]') FROM {server.schema}.job_logs"
        f" WHERE job_id = '{job_id}'"
    )
    return json.loads(rows)


def wait_logs(server, job_id, predicate, timeout=30):
    deadline = time.monotonic() + timeout
    logs = []
    while time.monotonic() < deadline:
        logs = logs_of(server, job_id)
        if predicate(logs):
            return logs
        time.sleep(0.05)
    raise AssertionError(f"logs of {job_id} not as expected: {logs}")


def test_meta_reaches_the_worker_and_logs_are_stored(server):
    seen = {}

    def handle(job):
        seen[job.args["n"]] = job.meta
        job.log("info", "started", rows=job.args["n"])
        for i in range(job.args["flood"]):
            job.log("debug", f"row {i} " + "x" * 100)
        job.log("warn", "done")

    with Client(server.endpoint, token=server.token) as client:
        quiet = client.submit("chatty", {"n": 1, "flood": 0},
                              meta={"tenant": "acme", "traceparent": TRACEPARENT})
        noisy = client.submit("chatty", {"n": 2, "flood": 2000})
        try:
            client.submit("chatty", {"n": 3, "flood": 0}, meta=["not", "a", "map"])
            raise AssertionError("a non-map meta was accepted")
        except HopperError as e:
            assert "meta must be a JSON object" in str(e)
        try:
            client.submit("chatty", {"n": 3, "flood": 0}, meta={"traceparent": "00-nope"})
            raise AssertionError("a bad traceparent was accepted")
        except HopperError as e:
            assert "traceparent" in str(e)
    worker = Worker(server.endpoint, token=server.token, handlers={"chatty": handle})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    server.wait_for(lambda c: c.get("completed") == 2, timeout=60)
    quiet_logs = wait_logs(server, quiet, lambda logs: len(logs) == 1
                           and len(logs[0]["lines"]) == 2)
    noisy_logs = wait_logs(server, noisy, lambda logs: len(logs) == 1
                           and len(logs[0]["lines"]) + logs[0]["dropped"] == 2002)
    worker.stop()
    thread.join(timeout=30)

    assert seen[1] == {"tenant": "acme", "traceparent": TRACEPARENT}
    assert seen[2] == {}
    lines = quiet_logs[0]["lines"]
    assert [l["message"] for l in lines] == ["started", "done"]
    assert lines[0]["fields"] == {"rows": 1} and lines[1]["level"] == "warn"
    assert noisy_logs[0]["dropped"] > 0, "a flood is truncated"
    assert noisy_logs[0]["lines"][0]["message"] == "started"
    assert psql(f"SELECT count(*) FROM {server.schema}.jobs WHERE state = 'completed'") == "2"


def test_a_worker_killed_mid_attempt_keeps_the_lines_it_logged(server):
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("chatter", {"lines": 3})
    script = pathlib.Path(__file__).with_name("worker_proc.py")
    doomed = subprocess.Popen([sys.executable, str(script), server.endpoint, server.token,
                               "3600"])
    try:
        # Sent while the handler still runs: a second after the first line.
        before = wait_logs(server, job_id, lambda logs: len(logs) == 1
                           and len(logs[0]["lines"]) == 3)
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
    assert [l["message"] for l in before[0]["lines"]] == ["line 0", "line 1", "line 2"]

    def finish(job):
        job.log("info", "finished")

    worker = Worker(server.endpoint, token=server.token, handlers={"chatter": finish})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    server.wait_for(lambda c: c.get("completed") == 1, timeout=60)
    worker.stop()
    thread.join(timeout=30)

    with Client(server.endpoint, token=server.token) as client:
        logs = client.job_logs(job_id)
    assert [log["attempt"] for log in logs] == [1, 2]
    assert [l["message"] for l in logs[0]["lines"]] == ["line 0", "line 1", "line 2"]
    assert logs[0]["lines"][0]["fields"] == {"attempt": 1}
    assert logs[0]["lines"][0]["level"] == "info" and logs[0]["dropped"] == 0
    assert [l["message"] for l in logs[1]["lines"]] == ["finished"], "its own attempt"


def test_job_logs_reads_every_page_and_refuses_a_missing_job(server):
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("paged", {})
        assert client.job_logs(job_id) == []
        # Eleven attempts' logs, more than one page (8) of the server's.
        psql(f"UPDATE {server.schema}.jobs SET attempt = 11 WHERE id = '{job_id}';"
             f" INSERT INTO {server.schema}.job_logs (job_id, attempt, lines, bytes, dropped)"
             f" SELECT '{job_id}', g, jsonb_build_array(jsonb_build_object("
             f"'at', '2026-11-26T12:00:00Z', 'level', 'info', 'message', 'try ' || g)),"
             f" 60, g FROM generate_series(1, 11) AS g")
        logs = client.job_logs(job_id)
        assert [log["attempt"] for log in logs] == list(range(1, 12))
        assert [log["dropped"] for log in logs] == list(range(1, 12))
        assert logs[10]["lines"] == [{"at": "2026-11-26T12:00:00Z", "level": "info",
                                      "message": "try 11"}]
        try:
            client.job_logs("0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e")
            raise AssertionError("a missing job's logs were read")
        except HopperError as e:
            assert e.code == "not_found"
