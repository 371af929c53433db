"""One DEALER socket to the server: hello, request numbering, replies, reconnects, CURVE."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
from typing import Any, Callable, Dict, Mapping, Optional

import cbor2
import zmq
from zmq.utils import z85

from ._values import well_formed

VERSION = 1

#: A protocol message: one CBOR map with text keys (docs/protocol.md §2).
Message = Dict[str, Any]

log = logging.getLogger("hopper_client")


class HopperError(Exception):
    """The server refused a request: ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str, req: Optional[int] = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.req = req


class Unavailable(HopperError):
    """No reply in time, or the connection was lost: retrying later may succeed."""

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)


class Unencodable(HopperError):
    """A message the client cannot encode as the protocol's CBOR (it holds a value CBOR has
    no form for): sending it again cannot help. Its ``code`` is ``invalid``."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid", message)


def default_name() -> str:
    """The name a peer gives in its hello unless told otherwise: ``host:pid`` (a host name
    that is not UTF-8 with U+FFFD in its place)."""
    return well_formed(f"{socket.gethostname()}:{os.getpid()}")


def check_server_key(key: str) -> bytes:
    """The server's CURVE public key as the 40 Z85 characters libzmq wants, or ValueError."""
    if not isinstance(key, str) or len(key) != 40:
        raise ValueError("server_key must be the server's public key: 40 Z85 characters")
    try:
        z85.decode(key.encode("ascii"))
    except (ValueError, KeyError, UnicodeEncodeError) as e:
        raise ValueError(f"server_key is not Z85 text: {e}") from None
    if not zmq.has("curve"):
        raise ValueError("this pyzmq's libzmq has no CURVE support, so server_key cannot be used")
    return key.encode("ascii")


class Connection:
    """A DEALER socket that says hello and matches replies to requests by ``req``.

    Pushes (``order``, ``cancel``) and replies nobody waits for go to ``on_push``. With a
    ``server_key`` (the server's CURVE public key, Z85), each socket gets an ephemeral key
    pair of its own and the traffic is encrypted; a server with another key never answers.
    """

    def __init__(
        self,
        endpoint: str,
        token: Optional[str] = None,
        hello: Optional[Mapping[str, Any]] = None,
        timeout: float = 10.0,
        on_push: Optional[Callable[[Message], None]] = None,
        context: Optional[zmq.Context[zmq.Socket[bytes]]] = None,
        server_key: Optional[str] = None,
    ) -> None:
        self.endpoint = endpoint
        self.token = token if token is not None else os.environ.get("HOPPER_TOKEN")
        if server_key is None:
            server_key = os.environ.get("HOPPER_SERVER_KEY") or None
        self.server_key = None if server_key is None else check_server_key(server_key)
        self.hello_fields: Message = dict(hello or {"role": "client"})
        self.timeout = timeout
        self.on_push: Callable[[Message], None] = on_push or (lambda message: None)
        self.context: zmq.Context[zmq.Socket[bytes]] = context or zmq.Context.instance()
        self.heartbeat_s = 5.0
        self.max_frame = 2 * 1024 * 1024
        self.last_heard = time.monotonic()
        self._reqs = itertools.count(1)
        self._socket: Optional[zmq.Socket[bytes]] = None
        self.reconnects = 0

    # -- socket ---------------------------------------------------------------------------
    def open(self) -> None:
        """Creates the socket and says hello (raises HopperError if refused)."""
        self.close()
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        if self.server_key is not None:
            public, secret = zmq.curve_keypair()
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_key)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
            sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        sock.connect(self.endpoint)
        self._socket = sock
        self._hello()

    def close(self) -> None:
        """Closes the socket at once (unsent messages are dropped)."""
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None

    def reconnect(self, deadline: Optional[float] = None) -> None:
        """Recreates the socket and says hello again, retrying until ``deadline``
        (a ``time.monotonic()`` instant; for ever if None). On failure the socket is
        closed."""
        self.reconnects += 1
        delay = 0.05
        while True:
            try:
                self.open()
                return
            except Unavailable:
                if deadline is not None and time.monotonic() + delay > deadline:
                    self.close()
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except HopperError:
                self.close()
                raise

    def _hello(self) -> None:
        fields: Message = {"version": VERSION, "name": default_name()}
        fields.update(self.hello_fields)
        if self.token:
            fields["token"] = self.token
        reply = self._call_raw("hello", fields, resend_on_unauthorized=False)
        heartbeat_ms = reply.get("heartbeat_ms", 5000)
        if isinstance(heartbeat_ms, int):
            self.heartbeat_s = max(heartbeat_ms, 10) / 1000.0
        max_frame = reply.get("max_frame", self.max_frame)
        if isinstance(max_frame, int):
            self.max_frame = max_frame

    # -- messages -------------------------------------------------------------------------
    def next_req(self) -> int:
        """A fresh request number for this connection."""
        return next(self._reqs)

    def send(self, message: Message) -> int:
        """Sends one map (it must hold ``type``); returns its frame size. Raises
        :class:`Unavailable` if the socket cannot take it now (no connection),
        :class:`Unencodable` if it cannot be encoded, ``HopperError`` ``too_large`` if it is
        over the server's ``max_frame``."""
        try:
            frame = cbor2.dumps(message)
        except Exception as e:  # noqa: BLE001 - whatever the encoder raises, nothing was sent
            what = f"cannot encode {message.get('type')}: {type(e).__name__}: {e}"
            raise Unencodable(what) from e
        if len(frame) > self.max_frame:
            raise HopperError(
                "too_large", f"{len(frame)} bytes is over the server's {self.max_frame}"
            )
        if self._socket is None:
            raise Unavailable(f"cannot send {message.get('type')}: the connection is closed")
        try:
            self._socket.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            raise Unavailable(f"cannot send {message.get('type')}: not connected") from None
        return len(frame)

    def poll(self, timeout_s: float) -> Optional[Message]:
        """Receives one message within ``timeout_s`` (or None). Undecodable frames are
        skipped; a closed connection (a reconnect failed) waits out the timeout."""
        if self._socket is None:
            time.sleep(max(timeout_s, 0))
            return None
        if self._socket.poll(int(max(timeout_s, 0) * 1000)) == 0:
            return None
        frames = self._socket.recv_multipart()
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

    def call(
        self, type_: str, fields: Optional[Message] = None, timeout: Optional[float] = None
    ) -> Message:
        """Sends a request and waits for its reply. Re-hellos once if the server forgot
        this session (it restarted)."""
        return self._call_raw(type_, fields or {}, timeout=timeout)

    def _call_raw(
        self,
        type_: str,
        fields: Message,
        timeout: Optional[float] = None,
        resend_on_unauthorized: bool = True,
    ) -> Message:
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        for attempt in range(2):
            req = self.next_req()
            message: Message = {"type": type_, "req": req}
            message.update(fields)
            self.send(message)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(self._silence(type_, timeout))
                reply = self.poll(left)
                if reply is None:
                    continue
                if reply.get("req") != req:
                    self.on_push(reply)
                    continue
                if reply.get("type") != "error":
                    return reply
                code = str(reply.get("code"))
                if code == "unauthorized" and resend_on_unauthorized and attempt == 0:
                    self._hello()
                    break
                raise HopperError(code, str(reply.get("message", "")), req)
        raise Unavailable(f"{type_} refused twice")

    def _silence(self, type_: str, timeout: float) -> str:
        what = f"no reply to {type_} from {self.endpoint} within {timeout} s"
        if self.server_key is not None:
            # A CURVE handshake that fails is silent on the client's side.
            return what + " (is server_key the public key of the server at that endpoint?)"
        return what + " (if the server uses CURVE, pass its public key as server_key)"
