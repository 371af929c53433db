"""CURVE: a server started with --curve serves peers that know its public key, and nobody
else gets a single request through."""

import signal
import threading
import time

import cbor2
import pytest
import zmq

from conftest import Server, counting_nap
from hopper_client import Client, Unavailable, Worker


@pytest.fixture
def curve_server(schema, tmp_path):
    server = Server(schema, tmp_path, extra=["--curve"]).start()
    assert server.server_key, f"no server key in the log:\n{server.log.read_text()}"
    yield server
    server.kill()


def test_a_client_and_a_worker_with_the_server_key_work(curve_server):
    server = curve_server
    worker = Worker(server.endpoint, token=server.token, server_key=server.server_key,
                    concurrency=4, handlers={"k": lambda job: None})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    with Client(server.endpoint, token=server.token, server_key=server.server_key) as client:
        ids = client.submit_batch([{"kind": "k", "args": {"n": n}} for n in range(50)])
        server.wait_for(lambda c: c.get("completed") == 50)
        assert client.status(ids[0])["state"] == "completed"
    worker.stop()
    thread.join(timeout=30)


def test_plaintext_and_wrong_key_peers_get_nothing_through(curve_server):
    server = curve_server
    wrong_key, _ = zmq.curve_keypair()
    for key in (None, wrong_key.decode()):
        started = time.monotonic()
        with pytest.raises(Unavailable) as silent:
            Client(server.endpoint, token=server.token, server_key=key, timeout=2)
        assert time.monotonic() - started < 10
        assert "server_key" in str(silent.value)

    # Raw DEALERs with the right token, asking straight away, one in plaintext and one
    # encrypting to another key: no reply, nothing written.
    for key in (None, wrong_key):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        # A send waits while the socket has no connection to queue on, which is what a
        # refused handshake leaves it with at times: bounded, and a send that finds no
        # connection got nothing through either.
        sock.setsockopt(zmq.SNDTIMEO, 2000)
        if key is not None:
            public, secret = zmq.curve_keypair()
            sock.setsockopt(zmq.CURVE_SERVERKEY, key)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        sock.connect(server.endpoint)
        for message in ({"type": "hello", "req": 1, "version": 1, "role": "client",
                         "token": server.token},
                        {"type": "submit", "req": 2, "job": {"kind": "k"}}):
            try:
                sock.send(cbor2.dumps(message))
            except zmq.Again:
                pass
        assert sock.poll(2000) == 0, f"key {key!r}: answered"
        sock.close(0)
    assert server.counts() == {}

    # The server is unharmed: a peer with the key is served at once.
    with Client(server.endpoint, token=server.token, server_key=server.server_key) as client:
        assert client.status(client.submit("k", {}))["state"] == "available"


def test_workers_reconnect_to_a_restarted_curve_server_and_finish_every_job(curve_server):
    server = curve_server
    key = server.server_key
    nap, runs = counting_nap()

    with Client(server.endpoint, token=server.token, server_key=key) as client:
        ids = client.submit_batch([{"kind": "nap", "args": {}} for _ in range(1000)])
    workers = []
    for i in range(2):
        worker = Worker(server.endpoint, token=server.token, server_key=key, concurrency=8,
                        handlers={"nap": nap}, name=f"curve-py{i}")
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        workers.append((worker, thread))
    server.wait_for(lambda c: c.get("completed", 0) >= 200, timeout=60)
    server.kill(signal.SIGKILL)
    time.sleep(0.5)
    server.start()
    assert server.server_key == key, "the restarted server kept its key pair"
    server.wait_for(lambda c: c.get("completed") == 1000, timeout=120)
    for worker, thread in workers:
        worker.stop()
        thread.join(timeout=30)
    # At least 800 jobs completed after the restart: only the reconnected workers ran them.
    assert set(runs) == set(ids)


def test_a_bad_server_key_is_refused_before_connecting():
    with pytest.raises(ValueError):
        Client("tcp://127.0.0.1:1", server_key="too short")
    with pytest.raises(ValueError):
        Client("tcp://127.0.0.1:1", server_key="~" * 40)
