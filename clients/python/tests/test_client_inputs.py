"""What the client refuses before sending: values the protocol has no form for (not JSON,
CBOR tags), naive datetimes, options of the wrong type or out of range, unknown filters and
settings; each a clear TypeError or ValueError, and nothing submitted."""

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
        # What stays the server's to say, and is clear: the shape of args.
        assert client.submit("k", (1, 2))
    assert server.counts() == {"available": 1}
