"""What the client refuses before sending: values the protocol has no form for (not JSON,
CBOR tags, text UTF-8 cannot encode), naive datetimes, options of the wrong type or out of
range, unknown filters and settings; each a clear TypeError or ValueError, and nothing
submitted."""

import datetime
import decimal
import math
import uuid

import pytest

from hopper_client import Client

UTC = datetime.timezone.utc


def test_run_at_and_created_filters_take_aware_datetimes_only(server):
    with Client(server.endpoint, token=server.token) as client:
        with pytest.raises(ValueError, match="timezone-aware"):
            client.submit("k", {}, run_at=datetime.datetime.now())
        with pytest.raises(TypeError, match="run_at"):
            client.submit("k", {}, run_at=1_800_000_000)
        later = datetime.datetime.now(UTC) + datetime.timedelta(hours=1)
        job_id = client.submit("k", {}, run_at=later)
        assert client.status(job_id)["state"] == "scheduled"

        before = datetime.datetime.now(UTC) - datetime.timedelta(hours=1)
        assert [j["id"] for j in client.list_jobs(created_after=before)] == [job_id]
        assert client.list_jobs(created_before=before) == []
        assert client.list_jobs(created_after=later) == []
        assert [j["id"] for j in client.list_jobs(created_after=before.isoformat())] == [job_id]
        with pytest.raises(ValueError, match="created_after must be a timezone-aware"):
            client.list_jobs(created_after=datetime.datetime.now())
        with pytest.raises(TypeError):
            client.list_jobs(stat="failed")  # a typo is not an empty filter
        with pytest.raises(TypeError, match="limit"):
            client.list_jobs(limit="5")
    assert server.counts() == {"scheduled": 1}


def test_a_page_of_nodes_is_asked_for_with_a_limit_and_a_text_cursor(server):
    with Client(server.endpoint, token=server.token) as client:
        for limit, error in [(0, ValueError), (-1, ValueError), (1001, ValueError),
                             (2**70, ValueError), ("5", TypeError), (True, TypeError),
                             (2.0, TypeError)]:
            with pytest.raises(error, match="limit"):
                client.nodes(limit=limit)
        for before, error in [(5, TypeError), (b"AZC0", TypeError),
                              ("AZC0\udc80", ValueError)]:
            with pytest.raises(error, match="before"):
                client.nodes(before=before)
        with pytest.raises(TypeError):
            client.nodes(after="AZC0")  # a typo is not the first page
        assert len(client.nodes(limit=1)["nodes"]) == 1


@pytest.mark.parametrize("bad, error, names", [
    ({"when": datetime.datetime.now(UTC)}, TypeError, "args['when'] is of type datetime"),
    ({"id": uuid.uuid4()}, TypeError, "args['id'] is of type uuid.UUID"),
    ({"tags": {"a", "b"}}, TypeError, "args['tags'] is of type set"),
    ({"price": decimal.Decimal("1.5")}, TypeError, "args['price'] is of type decimal.Decimal"),
    ([1, b"raw"], TypeError, "args[1] is of type bytes"),
    ({1: "one"}, TypeError, "the key 1"),
    ({"x": math.nan}, ValueError, "args['x']: nan is not a JSON number"),
    ({"x": [math.inf]}, ValueError, "args['x'][0]: inf"),
    ({"x": 2**64}, ValueError, "does not fit in 64 bits"),
])
def test_args_and_meta_that_are_not_json_are_refused_before_sending(server, bad, error, names):
    with Client(server.endpoint, token=server.token) as client:
        with pytest.raises(error) as refused:
            client.submit("k", bad)
        assert names in str(refused.value)
        with pytest.raises(error) as in_meta:
            client.submit("k", {}, meta={"m": bad})
        assert "meta['m']" in str(in_meta.value)
        with pytest.raises(error):
            client.submit_batch([{"kind": "k", "args": {}}, {"kind": "k", "args": bad}])
    assert server.counts() == {}


def test_options_of_the_wrong_type_or_range_are_refused_before_sending(server):
    with Client(server.endpoint, token=server.token) as client:
        for options, error, message in [
            ({"delay_ms": 1.5}, TypeError, "delay_ms must be an int"),
            ({"delay_ms": -1}, ValueError, "delay_ms must be from 0"),
            ({"delay_ms": 315_360_000_001}, ValueError, "delay_ms must be from 0"),
            ({"max_attempts": 0}, ValueError, "max_attempts must be from 1"),
            ({"timeout_ms": True}, TypeError, "timeout_ms must be an int"),
            ({"priority": True}, TypeError, "priority"),
            ({"priority": 40_000}, ValueError, "priority"),
            ({"queue": 5}, TypeError, "queue must be a str"),
        ]:
            with pytest.raises(error, match=message):
                client.submit("k", {}, **options)
        with pytest.raises(TypeError, match="kind must be a str"):
            client.submit(5, {})
        with pytest.raises(TypeError, match="unknown queue settings"):
            client.update_queue("mail", pausd=True)
        with pytest.raises(TypeError, match="minutes must be an int"):
            client.job_stats("5")
        with pytest.raises(ValueError, match="a batch holds at most 10,000 jobs, got 10,001"):
            client.submit_batch([{"kind": "k"}] * 10_001)

        def endless():
            for _ in range(10_001):
                yield {"kind": "k"}
            raise AssertionError("the batch was read past its bound")

        with pytest.raises(ValueError, match="got 10,001 or more"):
            client.submit_batch(endless())
        # What stays the server's to say, and is clear: the shape of args.
        assert client.submit("k", (1, 2))
    assert server.counts() == {"available": 1}


def test_text_that_utf8_cannot_encode_is_refused_naming_where(server):
    """A lone surrogate (here from bytes decoded with surrogateescape, as file names are) is
    a ValueError naming where it is, not the encoder's Unencodable without a path."""
    file_name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    assert file_name == "caf\udce9.txt"
    with Client(server.endpoint, token=server.token) as client:
        for call, where in [
            (lambda: client.submit("k", {"file": file_name}),
             "args['file'] holds a lone surrogate '\\udce9' at index 3,"
             " which UTF-8 cannot encode"),
            (lambda: client.submit("k", {"faces": ["ok", "\ud83d\ude00"]}),
             "args['faces'][1] holds a lone surrogate '\\ud83d' at index 0"),
            (lambda: client.submit("k", {}, meta={"\udc00": 1}),
             "meta: the key '\\udc00' holds a lone surrogate"),
            (lambda: client.submit("k\udbff"), "kind holds a lone surrogate '\\udbff' at index 1"),
            (lambda: client.submit("k", {}, queue="q\ud800"), "queue holds"),
            (lambda: client.submit("k", {}, priority="high\ud800"), "priority holds"),
            (lambda: client.submit("k", {}, run_at="2030-01-01T00:00:00Z\ud800"), "run_at holds"),
            (lambda: client.submit_batch([{"kind": "k"}, {"kind": "k", "args": ["\ud800"]}]),
             "args[0] holds"),
            (lambda: client.status("\ud83d"), "id holds"),
            (lambda: client.job_logs("\ud83d"), "id holds"),
            (lambda: client.cancel("\ud83d"), "id holds"),
            (lambda: client.retry("\ud83d"), "id holds"),
            (lambda: client.delete("\ud83d"), "id holds"),
            (lambda: client.list_jobs(kind="k\udc80"), "kind holds"),
            (lambda: client.list_jobs(before="\udc80"), "before holds"),
            (lambda: client.retry_failed(queue="q\udc80"), "queue holds"),
            (lambda: client.clear("q\udc80"), "queue holds"),
            (lambda: client.update_queue("q\udc80", paused=True), "queue holds"),
            (lambda: client.update_queue("q", rate={"jobs\udc80": 1}),
             "the queue settings['rate']: the key 'jobs\\udc80' holds"),
            (lambda: Client(server.endpoint, token=server.token, name="n\udc80"), "name holds"),
        ]:
            with pytest.raises(ValueError) as refused:
                call()
            assert str(refused.value).startswith(where), str(refused.value)
        # Text without a surrogate goes, astral characters too.
        job_id = client.submit("k", {"face": "\U0001f600"})
        assert client.status(job_id)["args"] == {"face": "\U0001f600"}
    assert server.counts() == {"available": 1}
