"""Bad frames and unauthenticated peers are refused; a good peer keeps working."""

import threading
import uuid

import cbor2
import zmq

from hopper_client import Client


def raw(server):
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(server.endpoint)
    return sock


def ask(sock, message=None, raw_bytes=None, delimiter=False):
    frame = raw_bytes if raw_bytes is not None else cbor2.dumps(message)
    sock.send_multipart([b"", frame] if delimiter else [frame])
    return cbor2.loads(sock.recv_multipart()[-1])


def test_bad_frames_and_strangers_never_disturb_a_good_peer(server):
    submitted = []
    errors = []

    def good_peer():
        try:
            with Client(server.endpoint, token=server.token) as client:
                for n in range(300):
                    submitted.append(client.submit("good", {"n": n}))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    thread = threading.Thread(target=good_peer)
    thread.start()

    s = raw(server)
    r = ask(s, {"type": "submit", "req": 1, "job": {"kind": "k"}})
    assert (r["type"], r["code"], r["req"]) == ("error", "unauthorized", 1)
    r = ask(s, {"type": "hello", "req": 2, "version": 1, "role": "client", "token": "nope"})
    assert r["code"] == "unauthorized"
    assert ask(s, raw_bytes=b"\xff\xfe garbage")["code"] == "bad_frame"
    r = ask(s, {"type": "hello", "req": 3, "version": 1, "role": "client",
                "token": server.token}, delimiter=True)
    assert r["type"] == "welcome" and r["req"] == 3 and r["max_frame"] == 2 * 1024 * 1024
    assert ask(s, raw_bytes=cbor2.dumps([1, 2, 3]))["code"] == "bad_frame"
    r = ask(s, {"type": "frobnicate", "req": 4})
    assert (r["code"], r["req"]) == ("unknown_type", 4)
    assert ask(s, {"type": "status", "req": 5, "id": 42})["code"] == "invalid"
    # cbor2 writes uuid.UUID as a CBOR tag: the protocol wants strings, so it is refused.
    assert ask(s, {"type": "status", "req": 6, "id": uuid.uuid4()})["code"] == "invalid"
    big = {"type": "submit", "req": 7, "job": {"kind": "k", "args": {"x": "y" * (3 << 20)}}}
    assert ask(s, big)["code"] == "too_large"
    r = ask(s, {"type": "heartbeat", "req": 8, "leases": []})
    assert r == {"type": "heartbeat_ack", "req": 8, "lost": []}

    thread.join(timeout=60)
    assert not errors, errors
    assert len(submitted) == 300
    s.close()


def test_insecure_mode_needs_no_token(schema, tmp_path):
    from conftest import Server

    server = Server(schema, tmp_path, extra=["--insecure-no-auth"]).start()
    try:
        with Client(server.endpoint, token=None) as client:
            job_id = client.submit("k", {})
            assert client.status(job_id)["state"] == "available"
    finally:
        server.kill()
