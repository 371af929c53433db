"""Job log lines through the real server while the database fails their stores: a
transient failure (a serialization failure, SQLSTATE 40001) is answered as such and the
worker sends the lines again, in order; a permanent one (a trigger's exception) is given up
at once; a request left without a reply is sent again."""

import logging
import threading
import time

from conftest import fail_log_stores, log_store_attempts, psql, table_locked, wait
from hopper_client import Client, Worker
from test_meta_logs import logs_of, wait_logs

LINES = 300


def numbered(job):
    for i in range(job.args["lines"]):
        job.log("info", f"line {i} " + "x" * 90)
        if i % 50 == 49:
            time.sleep(0.01)  # lets the worker send what is due mid-run


def run_worker(server, **options):
    worker = Worker(server.endpoint, token=server.token, handlers={"numbered": numbered},
                    **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def test_lines_the_database_fails_for_a_while_are_sent_again_in_order(server):
    fail_log_stores(server.schema, 3, "40001")
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("numbered", {"lines": LINES})
    worker, thread = run_worker(server)
    try:
        server.wait_for(lambda c: c.get("completed") == 1, timeout=60)
        logs = wait_logs(server, job_id, lambda logs: len(logs) == 1
                         and len(logs[0]["lines"]) >= LINES)
    finally:
        worker.stop()
        thread.join(timeout=30)
    expected = [f"line {i} " + "x" * 90 for i in range(LINES)]
    assert [line["message"] for line in logs[0]["lines"]] == expected, "all, in order, once"
    assert log_store_attempts(server.schema) > 3, "the failed stores were tried again"


def test_lines_the_database_refuses_for_good_are_given_up_at_once(server):
    fail_log_stores(server.schema, None, "P0001")
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("numbered", {"lines": 3})
    worker, thread = run_worker(server)
    server.wait_for(lambda c: c.get("completed") == 1, timeout=60)
    wait(lambda: log_store_attempts(server.schema) >= 1, what="a log store")
    started = time.monotonic()
    worker.stop()
    thread.join(timeout=30)
    # A worker that retried would still hold its log, and stop only after the bound.
    assert time.monotonic() - started < 4, "the worker waited on a refused log"
    assert log_store_attempts(server.schema) == 1, "one try, no retry"
    assert logs_of(server, job_id) == []


def test_a_log_request_left_without_a_reply_is_sent_again(server, caplog):
    # The first store waits behind a lock on the table past the worker's reply timeout, then
    # fails (transient): its reply comes late, to a request the worker sent again meanwhile.
    caplog.set_level(logging.WARNING, logger="hopper_client")
    fail_log_stores(server.schema, 1, "40001")
    with table_locked(f"{server.schema}.job_logs"):
        with Client(server.endpoint, token=server.token) as client:
            job_id = client.submit("numbered", {"lines": 3})
        worker, thread = run_worker(server, ack_timeout=2.0)
        wait(lambda: any("no reply" in r.getMessage() for r in caplog.records),
             what="the log request left without a reply")
    server.wait_for(lambda c: c.get("completed") == 1, timeout=60)
    worker.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()
    stored = [line["message"] for log in logs_of(server, job_id) for line in log["lines"]]
    expected = [f"line {i} " + "x" * 90 for i in range(3)]
    # Once: the late failure was not taken for the answer to the copy (and sent again).
    assert stored == expected, "all, in order, once"
    assert log_store_attempts(server.schema) == 2, "the first store, then the copy's"


def lock_waiters(table):
    """The statements waiting for a lock on ``table``."""
    return int(psql(f"SELECT count(*) FROM pg_locks"
                    f" WHERE relation = '{table}'::regclass AND NOT granted"))


def test_lines_resent_to_a_restarted_server_after_the_outcome_land(server):
    # The lines' store waits behind a lock on the table when the server dies, after the
    # job's outcome: the worker sends them again to the restarted server (same node id),
    # which takes them for the finished attempt of its node.
    table = f"{server.schema}.job_logs"
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("numbered", {"lines": 3})
    worker = thread = None
    try:
        with table_locked(table):
            worker, thread = run_worker(server)
            server.wait_for(lambda c: c.get("completed") == 1, timeout=60)
            wait(lambda: lock_waiters(table) >= 1, what="a store waiting for the lock")
            server.kill()
            # The killed server's statement would run on once the lock goes: ended with it.
            psql(f"SELECT pg_terminate_backend(pid) FROM pg_locks"
                 f" WHERE relation = '{table}'::regclass AND NOT granted")
        server.start()
        logs = wait_logs(server, job_id,
                         lambda logs: sum(len(log["lines"]) for log in logs) >= 3)
    finally:
        if worker is not None:
            worker.stop()
            thread.join(timeout=30)
    expected = [f"line {i} " + "x" * 90 for i in range(3)]
    assert [line["message"] for log in logs for line in log["lines"]] == expected
