"""Token roles and the token file's rules, and a worker's `bye`, through the real server."""

import os
import secrets
import threading
import time

import pytest

from conftest import Server
from hopper_client import Client, HopperError, Worker


def write_tokens(path, text, mode=0o600):
    path.write_text(text)
    os.chmod(path, mode)


def test_token_file_must_be_private_and_tokens_long(schema, tmp_path):
    server = Server(schema, tmp_path)
    good = secrets.token_hex(16)
    write_tokens(server.token_file, f"{good}\n", mode=0o644)
    with pytest.raises(RuntimeError, match="chmod 600"):
        server.start()
    write_tokens(server.token_file, "worker short-token\n")
    with pytest.raises(RuntimeError, match="shorter than 16 characters"):
        server.start()
    log = server.log.read_text()
    assert "short-token" not in log, "a token never reaches the log"


def test_each_token_does_what_its_role_allows(schema, tmp_path):
    server = Server(schema, tmp_path)
    client_token, worker_token, admin_token = (secrets.token_hex(16) for _ in range(3))
    write_tokens(server.token_file,
                 f"# roles\nclient {client_token}\nworker {worker_token}\n{admin_token}\n")
    server.start()
    try:
        with Client(server.endpoint, token=client_token) as client:
            job_id = client.submit("k", {})
            assert client.status(job_id)["state"] == "available"
            with pytest.raises(HopperError) as refused:
                client.list_jobs()
            assert refused.value.code == "unauthorized"
            assert "role is client" in str(refused.value)
        with Client(server.endpoint, token=worker_token) as client:
            client.submit("k", {})
            with pytest.raises(HopperError) as refused:
                client.queue_stats()
            assert refused.value.code == "unauthorized"
        with Client(server.endpoint, token=admin_token) as client:
            assert len(client.list_jobs()) == 2
    finally:
        server.kill()


def test_a_worker_that_said_bye_is_not_taken_for_silent(server):
    with Client(server.endpoint, token=server.token) as client:
        job_id = client.submit("quick", {})
    worker = Worker(server.endpoint, token=server.token, handlers={"quick": lambda job: None},
                    name="polite-worker")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    server.wait_for(lambda c: c.get("completed") == 1, timeout=30)
    worker.stop()
    thread.join(timeout=30)
    # Three heartbeat periods (300 ms each) and some: the server has ended the session.
    time.sleep(2)
    with Client(server.endpoint, token=server.token) as client:
        assert client.status(job_id)["state"] == "completed"
    log = server.log.read_text()
    assert "went silent" not in log, log
