"""Sending attempts' log lines as ``log`` requests, in order, again while they fail for a
transient reason.

One request per attempt is in flight at a time: lines written meanwhile wait in the job's
buffer for the next one, so an attempt's lines are stored in the order written. A request
the server answers with a transient error (``internal`` with ``transient`` true: the
database away, the server busy), or that cannot be sent, is sent again with backoff (50 ms
doubling to 1 s) for at most ``_RETRY_FOR_S`` after its first send; a permanent error, or
the bound reached, gives its lines up (logged, with how many).

A request left without a reply (none within the reply timeout, or the connection replaced)
is sent again at once, at most ``_RESENDS_UNANSWERED`` times, each time with a fresh
``_RETRY_FOR_S`` for transient errors; then its lines are given up. Each send takes a fresh
``req``, and only the last one's reply is taken: a late reply to an earlier one is not read
as the answer. So a batch is given up at most 3 x (5 s + the reply timeout) after its first
send (45 s with the default 10 s). Storage is at least once: a request sent again after a
store whose acknowledgement was lost is stored twice.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, Hashable, Optional

from ._connection import Message, Unencodable

log = logging.getLogger("hopper_client")

#: How long (seconds) after its first send a failed request is still sent again.
_RETRY_FOR_S = 5.0
#: The first delay (seconds) before sending a failed request again; it doubles...
_FIRST_DELAY_S = 0.05
#: ...up to this.
_MAX_DELAY_S = 1.0
#: How many times a request left without a reply is sent again before its lines are given up.
_RESENDS_UNANSWERED = 2


class _Request:
    """A ``log`` request of one attempt: sent and awaiting its reply (``req`` set), or
    waiting to be sent again (``retry_at`` set)."""

    def __init__(self, message: Message, now: float) -> None:
        self.message = message
        #: The first send, or the last one for lack of a reply: transient errors are sent
        #: again for ``_RETRY_FOR_S`` after it.
        self.first_sent = now
        self.sent_at = now
        self.req: Optional[int] = None
        self.retry_at: Optional[float] = None
        self.delay = _FIRST_DELAY_S
        self.tries = 0
        #: Times it was sent again for lack of a reply.
        self.unanswered = 0


class _Attempt:
    """An attempt with a request in flight, and where its next lines come from."""

    def __init__(self, take: Callable[[], Optional[Message]]) -> None:
        self.take = take
        #: The attempt ended: its last lines go as soon as the request in flight settles.
        self.last = False
        self.request: Optional[_Request] = None


class LogSender:
    """The ``log`` requests of a worker's attempts (see the module's docs).

    ``send`` sends a message and returns its ``req``, or None when it could not be sent
    (sent again later), or raises :class:`Unencodable` (its lines are given up at once);
    a request not answered within ``reply_timeout`` seconds of its last send is sent again
    (or, past the bound, given up).
    """

    def __init__(self, send: Callable[[Message], Optional[int]], reply_timeout: float) -> None:
        self._send = send
        self._reply_timeout = reply_timeout
        self._attempts: Dict[Hashable, _Attempt] = {}
        self._by_req: Dict[int, Hashable] = {}

    def pending(self) -> bool:
        """True while a request is in flight (sent, or waiting to be sent again)."""
        return bool(self._attempts)

    def offer(self, key: Hashable, take: Callable[[], Optional[Message]], now: float,
              last: bool = False) -> None:
        """Sends the lines ``take`` gives (a ``log`` message, or None) for the attempt
        ``key``, unless a request of it is in flight; ``last``: the attempt ended, its lines
        go once the request in flight settles."""
        attempt = self._attempts.get(key)
        if attempt is None:
            attempt = self._attempts[key] = _Attempt(take)
        attempt.last = attempt.last or last
        if attempt.request is None:
            self._next(key, attempt, now)

    def on_reply(self, reply: Message, now: float) -> bool:
        """Takes the reply if it answers a ``log`` request (True); False otherwise."""
        req = reply.get("req")
        key = self._by_req.pop(req, None) if isinstance(req, int) else None
        attempt = self._attempts.get(key) if key is not None else None
        if attempt is None or attempt.request is None:
            return False
        request = attempt.request
        request.req = None
        if reply.get("type") != "error":
            self._settle(key, attempt, now)
        elif reply.get("transient") is True or reply.get("code") == "unauthorized":
            # Unauthorized: the server forgot the session; the worker says hello again.
            self._retry_later(key, attempt, now, f"{reply.get('code')}: {reply.get('message')}")
        else:
            self._give_up(key, attempt, now, f"refused: {reply.get('message')}")
        return True

    def poll(self, now: float) -> None:
        """Sends again the requests whose delay passed, and those not answered in time."""
        for key, attempt in list(self._attempts.items()):
            request = attempt.request
            if request is None:
                continue
            if request.retry_at is not None and now >= request.retry_at:
                self._transmit(key, attempt, now)
            elif request.req is not None and now - request.sent_at > self._reply_timeout:
                why = f"no reply within {self._reply_timeout} s"
                self._unanswered(key, attempt, now, why, logging.WARNING)

    def resend(self, now: float) -> None:
        """Sends again the requests awaiting a reply (after a reconnect: the old socket's
        replies never come)."""
        for key, attempt in list(self._attempts.items()):
            request = attempt.request
            if request is not None and request.req is not None:
                self._unanswered(key, attempt, now, "reconnected", logging.DEBUG)

    def _next(self, key: Hashable, attempt: _Attempt, now: float) -> None:
        message = attempt.take()
        if message is None:
            del self._attempts[key]
            return
        attempt.request = _Request(message, now)
        self._transmit(key, attempt, now)

    def _transmit(self, key: Hashable, attempt: _Attempt, now: float) -> None:
        request = attempt.request
        assert request is not None
        request.retry_at = None
        request.tries += 1
        request.sent_at = now
        try:
            req = self._send(request.message)
        except Unencodable as e:
            self._give_up(key, attempt, now, str(e))
            return
        if req is None:
            self._retry_later(key, attempt, now, "not sent")
            return
        request.req = req
        self._by_req[req] = key

    def _unanswered(self, key: Hashable, attempt: _Attempt, now: float, why: str,
                    level: int) -> None:
        """The request in flight will get no reply: sent again under a fresh ``req`` (the
        old one's late reply, if any, is then not taken), with a fresh window for transient
        errors, unless it was sent again ``_RESENDS_UNANSWERED`` times already."""
        request = attempt.request
        assert request is not None and request.req is not None
        self._by_req.pop(request.req, None)
        request.req = None
        if request.unanswered >= _RESENDS_UNANSWERED:
            self._give_up(key, attempt, now, f"{why}, after {request.tries} tries")
            return
        request.unanswered += 1
        log.log(level, "log of job %s attempt %s: %s; sending it again",
                request.message.get("id"), request.message.get("attempt"), why)
        request.first_sent = now
        request.delay = _FIRST_DELAY_S
        self._transmit(key, attempt, now)

    def _retry_later(self, key: Hashable, attempt: _Attempt, now: float, why: str) -> None:
        request = attempt.request
        assert request is not None
        if now + request.delay >= request.first_sent + _RETRY_FOR_S:
            self._give_up(key, attempt, now, f"still failing after {request.tries} tries: {why}")
            return
        log.debug("log of %s failed (%s); sending it again in %.2f s",
                  request.message.get("id"), why, request.delay)
        request.retry_at = now + request.delay
        request.delay = min(request.delay * 2, _MAX_DELAY_S)

    def _give_up(self, key: Hashable, attempt: _Attempt, now: float, why: str) -> None:
        request = attempt.request
        assert request is not None
        lines = request.message.get("lines") or []
        log.warning("%d log lines of job %s attempt %s are lost: %s", len(lines),
                    request.message.get("id"), request.message.get("attempt"), why)
        self._settle(key, attempt, now)

    def _settle(self, key: Hashable, attempt: _Attempt, now: float) -> None:
        attempt.request = None
        if attempt.last:
            self._next(key, attempt, now)
        else:
            del self._attempts[key]
