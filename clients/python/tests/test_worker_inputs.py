"""What a handler gives the worker that the server would refuse: log fields that are not JSON,
unknown log levels, text UTF-8 cannot encode in a log line or an error, messages that cannot
be encoded, snoozes out of range, huge or unprintable errors. None of them may kill the
worker, lose other lines, or leave a job held (and heartbeated) or looping."""

import datetime
import math
import threading
import uuid
from pathlib import PurePosixPath as Path

import pytest

from conftest import wait
from hopper_client import Client, Permanent, Snooze, Worker

TEN_YEARS_S = 315_360_000


def start_worker(server, handlers):
    worker = Worker(server.endpoint, token=server.token, concurrency=4, handlers=handlers)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def stop(worker, thread):
    worker.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()


class Unprintable:
    def __str__(self):
        raise RuntimeError("no str for you")


def test_log_fields_that_are_not_json_are_written_as_text(server):
    aware = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.timezone.utc)
    naive = datetime.datetime(2026, 11, 28, 12, 0)
    marker = uuid.UUID("0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e")
    returned = []

    def chatty(job):
        job.log("info", "first", rows=1)
        returned.append(job.log("info", "odd", obj=Unprintable(), naive=naive, aware=aware,
                                id=marker, tags={"a"}, nan=math.nan, big=2**70, raw=b"x",
                                nested={1: [aware, (2, 3)]}))
        job.log("info", "last")

    with Client(server.endpoint, token=server.token) as client:
        first = client.submit("chatty", {})
        worker, thread = start_worker(server, {"chatty": chatty})
        server.wait_for(lambda c: c.get("completed") == 1, timeout=30)
        # The worker lives on: it runs the next job too.
        client.submit("chatty", {})
        server.wait_for(lambda c: c.get("completed") == 2, timeout=30)
        assert thread.is_alive()
        wait(lambda: len(client.job_logs(first)) == 1, what="the first job's log")
        [log] = client.job_logs(first)
    stop(worker, thread)
    assert returned == [None, None]
    assert [line["message"] for line in log["lines"]] == ["first", "odd", "last"]
    fields = log["lines"][1]["fields"]
    assert fields["obj"].startswith("<") and "__str__ raised" in fields["obj"]
    assert fields["naive"] == str(naive) and fields["aware"] == str(aware)
    assert fields["id"] == str(marker) and fields["tags"] == "{'a'}"
    assert fields["nan"] == "nan" and fields["big"] == str(2**70) and fields["raw"] == "b'x'"
    assert fields["nested"] == {"1": [str(aware), [2, 3]]}


def test_lone_surrogates_in_log_lines_and_errors_are_sent_as_replacement_characters(server):
    """Without the fix, the log batch holding such a line is given up (the other lines with
    it), and a failure's outcome cannot be encoded: dropped, the job runs again after its
    lease."""
    file_name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.fsdecode gives

    def logs(job):
        job.log("info", "before")
        job.log("info", "half \ud800 a pair", file=file_name, nested={"k\udc00": ["\udbff"]},
                odd={1: Path("\udc80")})
        job.log("info", "\ud83d\ude00 is two code points in Python")
        job.log("info", "after")

    def fails(job):
        if job.args["how"] == "error":
            raise RuntimeError(f"cannot open {file_name}")
        if job.args["how"] == "permanent":
            raise Permanent("half \udfff a pair")
        raise SystemExit(f"gave up on {file_name}")

    with Client(server.endpoint, token=server.token) as client:
        logged = client.submit("logs", {})
        failed = {how: client.submit("fails", {"how": how}, max_attempts=1)
                  for how in ("error", "permanent", "exit")}
        worker, thread = start_worker(server, {"logs": logs, "fails": fails})
        # Without the fix the failures stay running until their lease ends.
        server.wait_for(lambda c: c.get("completed") == 1 and c.get("failed") == 3, timeout=30)
        errors = {how: client.status(i)["errors"] for how, i in failed.items()}
        wait(lambda: len(client.job_logs(logged)) == 1, what="the log")
        [log] = client.job_logs(logged)
    stop(worker, thread)
    assert [len(e) for e in errors.values()] == [1, 1, 1], "each ran once"
    assert errors["error"][0]["error"] == "RuntimeError: cannot open caf\ufffd.txt"
    assert errors["permanent"][0]["error"] == "half \ufffd a pair"
    assert errors["exit"][0]["error"] == ("the worker failed while running the handler:"
                                          " SystemExit: gave up on caf\ufffd.txt")
    assert [line["message"] for line in log["lines"]] == [
        "before", "half \ufffd a pair", "\ufffd\ufffd is two code points in Python", "after"]
    assert log["lines"][1]["fields"] == {"file": "caf\ufffd.txt", "nested": {"k\ufffd": ["\ufffd"]},
                                         "odd": {"1": "\ufffd"}}


def test_names_queues_and_kinds_that_utf8_cannot_encode_are_refused_when_made():
    endpoint, token = "tcp://127.0.0.1:1", "t" * 16
    for options, where in [({"name": "n\udc80"}, "name holds a lone surrogate '\\udc80'"),
                           ({"queues": ["a", "q\ud800"]}, "queues[1] holds"),
                           ({"handlers": {"k\udc80": print}}, "the kind of a handler holds")]:
        with pytest.raises(ValueError) as refused:
            Worker(endpoint, token=token, **options)
        assert str(refused.value).startswith(where), str(refused.value)
    with pytest.raises(ValueError, match="^kind holds a lone surrogate"):
        Worker(endpoint, token=token).handler("k\udc80")
    with pytest.raises(TypeError, match="queues\\[0\\] must be a str"):
        Worker(endpoint, token=token, queues=[5])


def test_log_levels_are_the_servers_and_pythons_names_and_others_raise(server):
    refused = []

    def levels(job):
        for level in ("TRACE", "debug", "Info", "warn", "WARNING", "error", "critical", "fatal"):
            job.log(level, level)
        for level in ("loud", "", None, 30):
            try:
                job.log(level, "never")
            except ValueError as e:
                refused.append(str(e))

    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("levels", {})
        worker, thread = start_worker(server, {"levels": levels})
        server.wait_for(lambda c: c.get("completed") == 1, timeout=30)
        wait(lambda: len(client.job_logs(job_id)) == 1, what="the log")
        [log] = client.job_logs(job_id)
    stop(worker, thread)
    assert [line["level"] for line in log["lines"]] == [
        "trace", "debug", "info", "warn", "warn", "error", "error", "error"]
    assert len(refused) == 4
    assert "'loud'" in refused[0] and "unknown log level" in refused[0]


def test_a_message_that_cannot_be_encoded_is_dropped_not_raised():
    """The worker's send paths: a value with no CBOR form is logged and dropped (an outcome
    is then not kept for resending), and the log sender gives such lines up at once."""
    from hopper_client._connection import Connection, Unencodable
    from hopper_client._log_sender import LogSender

    worker = Worker("tcp://127.0.0.1:1", token="t" * 16)
    worker._conn = Connection("tcp://127.0.0.1:1", token="t" * 16)
    assert worker._send({"type": "heartbeat", "leases": [object()]}) is None
    worker._send_outcome({"type": "completed", "id": "x", "attempt": 1, "odd": object()})
    assert worker._unacked == {}
    try:
        worker._try_send({"type": "log", "lines": [object()]})
        raise AssertionError("an unencodable log request was sent")
    except Unencodable as e:
        assert e.code == "invalid" and "cannot encode log" in str(e)

    sender = LogSender(worker._try_send, reply_timeout=1.0)
    taken = [{"type": "log", "id": "x", "attempt": 1, "lines": [{"odd": object()}]}, None]
    sender.offer(("x", 1), lambda: taken.pop(0), 0.0, last=True)
    assert not sender.pending(), "given up at once, not sent again for 5 s"


@pytest.mark.parametrize("delay", [math.inf, -math.inf, math.nan, -5, TEN_YEARS_S + 1, 1e308])
def test_a_snooze_out_of_range_is_refused_when_made(delay):
    with pytest.raises(ValueError, match="Snooze delay"):
        Snooze(delay)


def test_a_snooze_in_range_is_taken():
    assert Snooze(0).delay == 0 and Snooze(TEN_YEARS_S).delay == TEN_YEARS_S
    with pytest.raises(TypeError):
        Snooze("30")


@pytest.mark.parametrize("delay", [math.inf, math.nan, -5, TEN_YEARS_S + 1])
def test_a_snooze_that_carries_a_bad_delay_fails_the_attempt(server, delay):
    """A Snooze whose delay was changed after it was made: the attempt fails (counted), so
    the job neither stays held nor loops."""

    def snoozy(job):
        snooze = Snooze(1)
        snooze.delay = delay
        raise snooze

    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("snoozy", {}, max_attempts=1)
        worker, thread = start_worker(server, {"snoozy": snoozy})
        server.wait_for(lambda c: c.get("failed") == 1, timeout=30)
        job = client.status(job_id)
    stop(worker, thread)
    assert job["attempts_used"] == 1
    assert "invalid Snooze" in job["errors"][0]["error"]


def test_huge_unprintable_and_exiting_errors_fail_the_attempt(server):
    def broken(job):
        mode = job.args["mode"]
        if mode == "huge":
            raise RuntimeError("x" * 3_000_000)  # over the server's frame as is
        if mode == "unprintable":
            raise type("Odd", (Exception,), {"__str__": Unprintable.__str__})()
        if mode == "extend":
            job.extend(math.inf)
        raise SystemExit(3)

    with Client(server.endpoint, token=server.token) as client:
        ids = {mode: client.submit("broken", {"mode": mode}, max_attempts=1)
               for mode in ("huge", "unprintable", "extend", "exit")}
        worker, thread = start_worker(server, {"broken": broken})
        server.wait_for(lambda c: c.get("failed") == 4, timeout=30)
        errors = {mode: client.status(i)["errors"][0]["error"] for mode, i in ids.items()}
        assert thread.is_alive()
    stop(worker, thread)
    assert errors["huge"].startswith("RuntimeError: xxx") and "characters cut" in errors["huge"]
    assert len(errors["huge"]) < 20_000
    assert "__str__ raised" in errors["unprintable"]
    assert "ValueError: extend seconds must be a finite number" in errors["extend"]
    assert "SystemExit" in errors["exit"]


def test_queues_given_as_one_str_are_refused():
    with pytest.raises(TypeError, match="list of queue names"):
        Worker("tcp://127.0.0.1:1", token="t" * 16, queues="mail")
