"""One DEALER socket to the server: hello, request numbering, replies, reconnects."""

import itertools
import logging
import os
import socket
import time

import cbor2
import zmq

VERSION = 1

log = logging.getLogger("hopper_client")


class HopperError(Exception):
    """The server refused a request: ``code`` is the protocol's error code."""

    def __init__(self, code, message, req=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.req = req


class Unavailable(HopperError):
    """No reply in time, or the connection was lost: retrying later may succeed."""

    def __init__(self, message):
        super().__init__("unavailable", message)


def default_name():
    return f"{socket.gethostname()}:{os.getpid()}"


class Connection:
    """A DEALER socket that says hello and matches replies to requests by ``req``.

    Pushes (``order``, ``cancel``) and replies nobody waits for go to ``on_push``.
    """

    def __init__(self, endpoint, token=None, hello=None, timeout=10.0, on_push=None,
                 context=None):
        self.endpoint = endpoint
        self.token = token if token is not None else os.environ.get("HOPPER_TOKEN")
        self.hello_fields = dict(hello or {"role": "client"})
        self.timeout = timeout
        self.on_push = on_push or (lambda message: None)
        self.context = context or zmq.Context.instance()
        self.heartbeat_s = 5.0
        self.max_frame = 2 * 1024 * 1024
        self.last_heard = time.monotonic()
        self._reqs = itertools.count(1)
        self.socket = None
        self.reconnects = 0

    # -- socket ---------------------------------------------------------------------------
    def open(self):
        """Creates the socket and says hello (raises HopperError if refused)."""
        self.close()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RECONNECT_IVL, 100)
        self.socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self.socket.connect(self.endpoint)
        self._hello()

    def close(self):
        if self.socket is not None:
            self.socket.close(0)
            self.socket = None

    def reconnect(self, deadline=None):
        """Recreates the socket and says hello again, retrying until ``deadline``."""
        self.reconnects += 1
        delay = 0.05
        while True:
            try:
                self.open()
                return
            except Unavailable:
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _hello(self):
        fields = {"version": VERSION, "name": default_name()}
        fields.update(self.hello_fields)
        if self.token:
            fields["token"] = self.token
        reply = self._call_raw("hello", fields, resend_on_unauthorized=False)
        self.heartbeat_s = max(reply.get("heartbeat_ms", 5000), 10) / 1000.0
        self.max_frame = reply.get("max_frame", self.max_frame)

    # -- messages -------------------------------------------------------------------------
    def next_req(self):
        return next(self._reqs)

    def send(self, message):
        """Sends one map (it must hold ``type``); returns its frame size."""
        frame = cbor2.dumps(message)
        if len(frame) > self.max_frame:
            raise HopperError("too_large",
                              f"{len(frame)} bytes is over the server's {self.max_frame}")
        self.socket.send(frame)
        return len(frame)

    def poll(self, timeout_s):
        """Receives one message within ``timeout_s`` (or None). Undecodable frames are
        skipped."""
        if self.socket.poll(int(max(timeout_s, 0) * 1000)) == 0:
            return None
        frames = self.socket.recv_multipart()
        self.last_heard = time.monotonic()
        try:
            message = cbor2.loads(frames[-1])
        except Exception as e:  # noqa: BLE001 - a bad frame is logged and skipped, never fatal
            log.warning("skipped an undecodable frame from the server: %s", e)
            return None
        if not isinstance(message, dict):
            log.warning("skipped a frame that is not a map: %r", type(message))
            return None
        return message

    def call(self, type_, fields=None, timeout=None):
        """Sends a request and waits for its reply. Re-hellos once if the server forgot
        this session (it restarted)."""
        return self._call_raw(type_, fields or {}, timeout=timeout)

    def _call_raw(self, type_, fields, timeout=None, resend_on_unauthorized=True):
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        for attempt in range(2):
            req = self.next_req()
            message = {"type": type_, "req": req}
            message.update(fields)
            self.send(message)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(f"no reply to {type_} within {timeout} s")
                reply = self.poll(left)
                if reply is None:
                    continue
                if reply.get("req") != req:
                    self.on_push(reply)
                    continue
                if reply.get("type") != "error":
                    return reply
                code = reply.get("code")
                if code == "unauthorized" and resend_on_unauthorized and attempt == 0:
                    self._hello()
                    break
                raise HopperError(code, reply.get("message", ""), req)
        raise Unavailable(f"{type_} refused twice")
