"""Submit, status and cancel through the real server."""

import os
import stat

import pytest

from conftest import ID, psql
from hopper_client import Client, HopperError


def test_generated_token_file_is_private_and_required(server):
    mode = stat.S_IMODE(os.stat(server.token_file).st_mode)
    assert mode == 0o600
    with pytest.raises(HopperError) as refused:
        Client(server.endpoint, token="not-the-token", timeout=5)
    assert refused.value.code == "unauthorized"


def test_submit_status_cancel(server):
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("email", {"to": "ada@example.com"}, queue="mail",
                               priority="high", max_attempts=3)
        assert ID.match(job_id)
        job = client.status(job_id)
        assert job["state"] == "available"
        assert job["queue"] == "mail"
        assert job["priority"] == 1
        assert job["args"] == {"to": "ada@example.com"}

        later = client.submit("email", {}, delay_ms=60_000)
        assert client.status(later)["state"] == "scheduled"

        cancelled = client.cancel(job_id)
        assert cancelled["state"] == "cancelled"
        with pytest.raises(HopperError) as again:
            client.cancel(job_id)
        assert again.value.code == "conflict"

        with pytest.raises(HopperError) as missing:
            client.status("0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e")
        assert missing.value.code == "not_found"

        with pytest.raises(HopperError) as invalid:
            client.submit("bad kind!", {})
        assert invalid.value.code == "invalid"

        ids = client.submit_batch([{"kind": "k", "args": {"n": n}} for n in range(500)])
        assert len(ids) == 500 and len(set(ids)) == 500
    assert server.counts()["available"] == 500


def test_admin_requests(server):
    with Client(server.endpoint, token=server.token) as client:
        ids = [client.submit("k", {"n": n}, queue="mail") for n in range(3)]
        # Newest first: the client's ids are UUIDv7, so the last submitted is listed first.
        listed = [j["id"] for j in client.list_jobs(queue="mail", limit=3)]
        assert listed == ids[::-1]
        assert [j["id"] for j in client.list_jobs(queue="mail", before=listed[0])] == listed[1:]
        assert len(client.list_jobs(queue="mail", limit=2)) == 2
        client.cancel(ids[0])
        assert client.retry(ids[0])["state"] == "available"
        client.cancel(ids[1])
        client.delete(ids[1])
        with pytest.raises(HopperError) as missing:
            client.status(ids[1])
        assert missing.value.code == "not_found"
        stats = {s["queue"]: s for s in client.queue_stats()}
        assert stats["mail"]["available"] == 2
        paused = client.update_queue("mail", paused=True, max_running=3)
        assert paused["paused"] and paused["max_running"] == 3
        lifted = client.update_queue("mail", max_running=None)
        assert lifted["paused"] and lifted["max_running"] is None
        assert [q["queue"] for q in client.queues()] == ["mail"]
        assert client.cron() == []
        # The server registered itself; nothing has finished yet.
        listed = client.nodes()
        assert listed["next_before"] is None
        [node] = listed["nodes"]
        assert set(node) == {"id", "name", "queues", "concurrency", "started_at",
                             "heartbeat_at"}
        assert client.job_stats() == []
        for minutes in (0, 1441):
            with pytest.raises(HopperError) as refused:
                client.job_stats(minutes)
            assert refused.value.code == "invalid" and "1 to 1440" in str(refused.value)
        assert client.retry_failed(queue="mail") == 0
        assert client.clear("mail") == 2
    assert server.counts().get("available", 0) == 0


def test_a_batch_is_listed_newest_first_and_paged_in_order(server):
    with Client(server.endpoint, token=server.token) as client:
        ids = client.submit_batch([{"kind": "k", "args": {"n": n}} for n in range(50)])
        first = [j["id"] for j in client.list_jobs(limit=30)]
        rest = [j["id"] for j in client.list_jobs(limit=30, before=first[-1])]
    assert first + rest == ids[::-1]


def register_nodes(schema, names):
    """Nodes of these names in the server's database, as runtimes register them; their last
    heartbeat an hour ahead, so that the server does not release them as silent meanwhile."""
    rows = ", ".join(f"(gen_random_uuid(), '{name}', '{{default}}', 1, now(),"
                     " now() + interval '1 hour')" for name in names)
    psql(f"INSERT INTO {schema}.nodes (id, name, queues, concurrency, started_at,"
         f" heartbeat_at) VALUES {rows}")


def test_nodes_are_paged_as_jobs_are(server):
    register_nodes(server.schema, [f"node-{n:02}" for n in range(24)])
    with Client(server.endpoint, token=server.token) as client:
        # 20 a page unless told, as list_jobs; the server's own node is among them.
        first = client.nodes()
        assert len(first["nodes"]) == 20 and isinstance(first["next_before"], str)
        rest = client.nodes(before=first["next_before"])
        assert rest["next_before"] is None
        every = first["nodes"] + rest["nodes"]
        names = [n["name"] for n in every]
        assert len(names) == 25 and sorted(names, key=str.encode) == names
        assert len({n["id"] for n in every}) == 25

        walked, before = [], None
        while True:
            page = client.nodes(limit=7, before=before)
            assert len(page["nodes"]) <= 7
            walked += [n["id"] for n in page["nodes"]]
            before = page["next_before"]
            if before is None:
                break
        assert walked == [n["id"] for n in every]
        assert client.nodes(limit=1000) == {"nodes": every, "next_before": None}

        # A cursor that is not one is the server's to refuse, naming it; nothing changes.
        for cursor in ["zzz", "", every[0]["id"], "A" * 10_000 + "!"]:
            with pytest.raises(HopperError) as refused:
                client.nodes(before=cursor)
            assert refused.value.code == "invalid", cursor[:20]
            assert "before" in str(refused.value) and "next_before" in str(refused.value)
        assert client.nodes(limit=1000)["nodes"] == every


def test_a_listing_leaves_out_large_values_pages_past_the_frame_and_filters(server):
    with Client(server.endpoint, token=server.token) as client:
        # 300 jobs of 4,004-byte args and 4,011-byte meta, both listed: about 2.4 MB, more
        # than one reply of 2 MiB holds. Then one whose args are left out.
        args, meta = ["x" * 4000], {"note": "n" * 3998}
        ids = []
        for _ in range(3):
            ids += client.submit_batch([{"kind": "k", "queue": "sized", "args": args,
                                         "meta": meta} for _ in range(100)])
        big = client.submit("k", ["y" * (100_000 - 4)], queue="sized")
        listed = client.list_jobs(queue="sized", limit=1000)
        assert [j["id"] for j in listed] == [big] + ids[::-1]
        assert listed[0]["args"] is None and listed[0]["args_bytes"] == 100_000
        assert listed[1]["args"] == args and listed[1]["meta"] == meta
        assert "args_bytes" not in listed[1]
        assert client.status(big)["args"] == ["y" * (100_000 - 4)]

        eu = client.submit("k", {}, queue="tenants", meta={"region": "eu"})
        us = client.submit("k", {}, queue="tenants", meta={"region": "us"})
        psql(f"UPDATE {server.schema}.jobs SET group_key = 'a' WHERE id = '{us}'")
        assert [j["id"] for j in client.list_jobs(queue="tenants",
                                                  meta={"region": "eu"})] == [eu]
        assert [j["id"] for j in client.list_jobs(queue="tenants", group="a")] == [us]
