"""A worker: receives orders, runs handlers on a thread pool, reports outcomes,
heartbeats, and reconnects when the server goes away."""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ._connection import (
    Connection,
    HopperError,
    Message,
    Unavailable,
    Unencodable,
    default_name,
)
from ._log_sender import LogSender
from ._tracing import job_span
from ._values import loggable, safe_str, seconds_ms, text

log = logging.getLogger("hopper_client")


class Snooze(Exception):
    """Raise from a handler to run the job again after ``delay`` seconds without using an
    attempt. ``delay`` is a finite number of seconds from 0 to ten years (the server's
    bound): anything else raises ValueError (TypeError for what is not a number) here."""

    def __init__(self, delay: float) -> None:
        seconds_ms(delay, "Snooze delay")
        super().__init__(f"snoozed for {delay} s")
        self.delay = delay


class Permanent(Exception):
    """Raise from a handler to fail the job for good (no retry): it is dead-lettered."""


#: A handler: runs one job; returns to complete it, raises to fail or snooze it.
Handler = Callable[["Job"], Any]

#: The longest error text an outcome carries, in characters; the rest is cut (so that the
#: outcome always fits in a frame, and a job's history of errors stays small).
_MAX_ERROR = 16 * 1024


def _error_text(error: BaseException, prefix: str = "") -> str:
    """An outcome's error text: ``prefix`` and ``str(error)`` (never raising, its lone
    surrogates replaced by U+FFFD: an outcome that cannot be encoded is dropped, and its job
    runs again after its lease), cut at 16 Ki characters."""
    text = prefix + safe_str(error)
    if len(text) > _MAX_ERROR:
        text = f"{text[:_MAX_ERROR]}... ({len(text) - _MAX_ERROR} more characters cut)"
    return text


#: The log levels the server takes, by every name :meth:`Job.log` accepts (lowercased):
#: the server's own (``warning`` is its alias of warn) and Python's critical and fatal.
_LEVELS = {"trace": "trace", "debug": "debug", "info": "info", "warn": "warn",
           "warning": "warn", "error": "error", "critical": "error", "fatal": "error"}


def log_level(level: str) -> str:
    """The server's name of a log level (any case; ``warning`` is warn, ``critical`` and
    ``fatal`` are error), or ValueError naming the level."""
    name = _LEVELS.get(level.lower()) if isinstance(level, str) else None
    if name is None:
        raise ValueError(f"unknown log level {level!r}: expected trace, debug, info, warn"
                         " (warning) or error (critical, fatal)")
    return name


#: The most log one attempt sends, as JSON (the server keeps the same bound); past it,
#: lines are counted as dropped.
_MAX_LOG_BYTES = 64 * 1024
#: The longest message of one log line, in characters (the server cuts at 4 KiB).
_MAX_MESSAGE = 4096
#: Lines are sent this long (seconds) after the first of them was written, while the job
#: runs, so that a worker that dies mid-attempt loses at most this much of its log...
_LOG_FLUSH_S = 1.0
#: ...or at once when this many bytes of them wait.
_LOG_FLUSH_BYTES = 16 * 1024


class Job:
    """One order: the job and the lease (``id``, ``attempt``) it is reported with."""

    def __init__(self, order: Message, worker: Worker) -> None:
        self.id: str = order["id"]
        self.attempt: int = order["attempt"]
        self.queue: Optional[str] = order.get("queue")
        self.kind: Optional[str] = order.get("kind")
        self.args: Any = order.get("args")
        self.priority: Optional[int] = order.get("priority")
        self.counted_attempt: Optional[int] = order.get("counted_attempt")
        self.max_attempts: Optional[int] = order.get("max_attempts")
        self.timeout_ms: Optional[int] = order.get("timeout_ms")
        meta = order.get("meta")
        #: The job's metadata (``{}`` when it has none), with the trace context of the span
        #: that enqueued it, which the worker continues when OpenTelemetry is installed.
        self.meta: Dict[str, Any] = meta if isinstance(meta, dict) else {}
        #: Set when the handler should stop: the job was cancelled or its lease was lost.
        #: Its outcome is then not reported.
        self.cancelled = threading.Event()
        self._worker = worker
        self._log_lines: List[Message] = []
        self._log_bytes = 0  # every line kept, sent or not: the attempt's bound
        self._log_pending = 0  # the lines not sent yet
        self._log_since: Optional[float] = None  # when the oldest of those was written
        self._log_dropped = 0
        self._log_full = False  # after the first drop every line is dropped
        self._log_lock = threading.Lock()

    def extend(self, seconds: float) -> None:
        """Asks the server to extend this job's lease to ``seconds`` from now (for a job
        longer than the lease; heartbeats already renew it while the worker lives).
        ``seconds`` is a finite number from 0 to ten years (the server's bound): ValueError
        (TypeError for what is not a number) otherwise."""
        by_ms = seconds_ms(seconds, "extend seconds")
        self._worker._outbox.put({"type": "extend", "id": self.id, "attempt": self.attempt,
                                  "by_ms": by_ms})

    def log(self, level: str, message: str, **fields: Any) -> None:
        """Writes a line to this attempt's log, kept with the job (``hopper jobs show``, the
        HTTP API, the dashboard). ``level`` is trace, debug, info, warn or error, in any
        case; Python's names are taken too: warning is warn, critical and fatal are error.
        Any other level raises ValueError (a programming error, as with a bad level in
        :mod:`logging`). ``fields`` are structured details, made JSON-compatible when the
        line is written: a value that is not a JSON type (a datetime, a UUID, a set, NaN,
        any object) is written as its ``str()``; a lone surrogate in the message, a field or
        a key, which UTF-8 cannot encode, as U+FFFD. Otherwise never raises (whatever the
        message or the fields hold) nor waits: lines are sent while the job runs, a second
        after the first of them was written (or once 16 KiB of them wait), and the rest just
        before the outcome. An attempt keeps at most 64 KiB of lines; the rest are counted
        as dropped. Lines the server cannot store now (the database away) are sent again for
        about 5 s, in order; stored at least once: a line may be stored twice if an
        acknowledgement is lost."""
        line: Message = {"level": log_level(level), "message": safe_str(message)[:_MAX_MESSAGE],
                         "at": datetime.now(timezone.utc).isoformat()}
        if fields:
            # A copy, of JSON types and UTF-8 text only: what the line holds cannot fail to
            # encode when it is sent (losing the lines sent with it), nor change meanwhile.
            line["fields"] = loggable(fields)
        try:
            size = len(json.dumps(line))
        except Exception:  # noqa: BLE001 - cannot happen (loggable); never raise for a line
            line.pop("fields", None)
            size = len(json.dumps(line))
        with self._log_lock:
            if self._log_full or self._log_bytes + size > _MAX_LOG_BYTES:
                # Only counted: the count goes with the next send (the last at the latest),
                # so logging past the bound sends nothing a second.
                self._log_full = True
                self._log_dropped += 1
                return
            if self._log_since is None:
                self._log_since = time.monotonic()
            self._log_bytes += size
            self._log_pending += size
            self._log_lines.append(line)

    def _log_due(self, now: float) -> bool:
        """True when the lines waiting must be sent: the oldest was written a second ago,
        or 16 KiB of them wait."""
        since = self._log_since
        return since is not None and (now - since >= _LOG_FLUSH_S
                                      or self._log_pending >= _LOG_FLUSH_BYTES)

    def _take_log(self) -> Optional[Message]:
        """The lines logged since the last take as one ``log`` message, or None when there
        are none. The attempt's bound counts the lines taken before."""
        with self._log_lock:
            self._log_since = None
            if not self._log_lines and not self._log_dropped:
                return None
            message: Message = {"type": "log", "id": self.id, "attempt": self.attempt,
                                "lines": self._log_lines, "dropped": self._log_dropped}
            self._log_lines = []
            self._log_pending = 0
            self._log_dropped = 0
            return message

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, kind={self.kind!r}, attempt={self.attempt})"


class Worker:
    """Runs handlers for the kinds registered with :meth:`handler`.

    The server sends at most ``concurrency`` orders at a time, each run on a thread of its
    own; with ``prefetch``, up to that many more, held until a thread frees (the server sends
    fewer while jobs are slow: what the threads start in 10 ms at the jobs' mean duration).
    Held orders not started when the worker stops are handed back (``released``).
    A handler returns normally to complete its job, raises :class:`Snooze` or
    :class:`Permanent`, or raises anything else to fail the attempt (retried with the
    server's backoff while attempts last).

    ``name``, each of ``queues`` and each handler's kind must be a str (TypeError otherwise;
    ``queues`` as one str too) that UTF-8 can encode (ValueError for a lone surrogate).
    """

    def __init__(
        self,
        endpoint: str,
        token: Optional[str] = None,
        queues: Iterable[str] = ("default",),
        concurrency: int = 1,
        name: Optional[str] = None,
        handlers: Optional[Mapping[str, Handler]] = None,
        shutdown_timeout: float = 30.0,
        ack_timeout: float = 10.0,
        prefetch: int = 0,
        server_key: Optional[str] = None,
    ) -> None:
        self.endpoint = endpoint
        self.token = token
        self.server_key = server_key
        if isinstance(queues, str):
            # list("mail") would serve the queues m, a, i and l.
            raise TypeError(f"queues must be a list of queue names, not a str: [{queues!r}]")
        # Text UTF-8 can encode: the hello could not be sent otherwise.
        self.queues = [text(q, f"queues[{i}]") for i, q in enumerate(queues)]
        self.concurrency = int(concurrency)
        self.prefetch = int(prefetch)
        self.name = text(name, "name") if name else default_name()
        self.handlers: Dict[str, Handler] = {
            text(kind, "the kind of a handler"): fn for kind, fn in (handlers or {}).items()}
        self.shutdown_timeout = shutdown_timeout
        self.ack_timeout = ack_timeout
        self._stop = threading.Event()
        self._results: queue.Queue[Tuple[Job, Message]] = queue.Queue()
        self._outbox: queue.Queue[Message] = queue.Queue()
        self._running: Dict[str, Job] = {}
        self._futures: Dict[str, Future[None]] = {}
        self._unacked: Dict[int, Tuple[float, Message]] = {}
        self._rehello = False
        #: The ``req`` of this session's bye not acknowledged yet (None: none waits), and
        #: until when (``time.monotonic()``) the worker waits for its acknowledgement.
        self._bye_req: Optional[int] = None
        self._bye_by = 0.0
        self._pool: Optional[ThreadPoolExecutor] = None
        self._conn: Optional[Connection] = None
        self._logs = LogSender(self._try_send, reply_timeout=ack_timeout)

    @property
    def conn(self) -> Connection:
        """The connection of :meth:`run` (RuntimeError before it starts)."""
        if self._conn is None:
            raise RuntimeError("the worker is not running")
        return self._conn

    def handler(self, kind: str) -> Callable[[Handler], Handler]:
        """Decorator: registers ``fn(job)`` for ``kind`` (TypeError if it is not a str,
        ValueError if it holds a lone surrogate)."""
        text(kind, "kind")

        def register(fn: Handler) -> Handler:
            self.handlers[kind] = fn
            return fn

        return register

    def stop(self) -> None:
        """Asks :meth:`run` to leave gracefully: the worker says bye (no more orders),
        running jobs finish (within ``shutdown_timeout``) and are reported, and :meth:`run`
        returns once the outcomes and the bye are acknowledged (the bye waited for at most
        ``ack_timeout``)."""
        self._stop.set()

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        """Serves until :meth:`stop` (or SIGINT/SIGTERM when run in the main thread)."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stop())
        hello: Message = {"role": "worker", "name": self.name, "queues": self.queues,
                 "concurrency": self.concurrency, "kinds": sorted(self.handlers)}
        if self.prefetch > 0:
            hello["prefetch"] = self.prefetch
        self._conn = Connection(self.endpoint, token=self.token, hello=hello,
                                on_push=self._on_message, server_key=self.server_key)
        pool = self._pool = ThreadPoolExecutor(max_workers=max(self.concurrency, 1))
        self.conn.reconnect()
        next_heartbeat = time.monotonic()
        leave_by: Optional[float] = None
        try:
            while True:
                now = time.monotonic()
                if self._stop.is_set() and leave_by is None:
                    leave_by = now + self.shutdown_timeout
                    self._say_bye()
                    self._release_unstarted()
                bye_waits = self._bye_req is not None and now < self._bye_by
                done = (not self._running and not self._unacked and not self._logs.pending()
                        and not bye_waits)
                if leave_by is not None and (done or now > leave_by):
                    if self._bye_req is not None:
                        log.warning("the server did not acknowledge the bye within %s s",
                                    self.ack_timeout)
                    break
                self._report_results()
                self._send_due_logs(now)
                self._logs.poll(now)
                self._flush_outbox()
                if now >= next_heartbeat:
                    leases = [{"id": j.id, "attempt": j.attempt} for j in self._running.values()]
                    leases += [{"id": m["id"], "attempt": m["attempt"]}
                               for _, m in self._unacked.values()]
                    self._send({"type": "heartbeat", "leases": leases})
                    next_heartbeat = now + self.conn.heartbeat_s
                if now - self.conn.last_heard > 3 * self.conn.heartbeat_s:
                    log.warning("hopper server silent; reconnecting")
                    self._reconnect()
                    continue
                for req, (sent, message) in list(self._unacked.items()):
                    if now - sent > self.ack_timeout:
                        del self._unacked[req]
                        self._send_outcome(message)
                if self._rehello:
                    self._rehello = False
                    self._reconnect()
                    continue
                try:
                    received = self.conn.poll(0.02)
                except Unavailable:
                    received = None
                if received is not None:
                    self._on_message(received)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self.conn.close()

    def _reconnect(self) -> None:
        try:
            self.conn.reconnect(deadline=time.monotonic() + 2 * self.conn.heartbeat_s)
        except HopperError as e:
            log.warning("reconnecting failed: %s", e)
            return
        if self._stop.is_set():
            # A new session: without its own bye, the server would send it orders (handed
            # back, and sent again) until the worker closed, then count the attempts of those
            # it held as a vanished worker's.
            self._say_bye()
        # Outcomes not yet acknowledged go again (a repeat is answered lease_lost), and so
        # do log requests: the old socket's replies never come.
        pending = [m for _, m in self._unacked.values()]
        self._unacked.clear()
        for message in pending:
            self._send_outcome(message)
        self._logs.resend(time.monotonic())

    def _say_bye(self) -> None:
        """Says bye in this session; :meth:`run` then waits for its acknowledgement (at
        most ``ack_timeout``): a bye closed away unread (the socket does not linger) would
        leave the server to take the close for a vanished worker's, and count the attempts
        of the orders it sent meanwhile. Orders sent before the bye arrive before its
        acknowledgement, and are handed back."""
        self._bye_req = self._send({"type": "bye"})
        self._bye_by = time.monotonic() + self.ack_timeout

    def _send(self, message: Message) -> Optional[int]:
        """Sends a message (with a fresh ``req`` unless it has one) and returns its ``req``,
        also when it could not be sent now (no connection: the caller may send it again);
        None when it can never be sent (it cannot be encoded, or is too large): then it is
        logged and dropped, never raised, so that the worker's loop carries on."""
        message = dict(message)
        message.setdefault("req", self.conn.next_req())
        try:
            self.conn.send(message)
        except Unavailable as e:
            log.warning("cannot send %s: %s", message.get("type"), e)
        except HopperError as e:  # unencodable or too large: sending it again cannot help
            log.error("dropped a %s message that cannot be sent: %s", message.get("type"), e)
            return None
        req: int = message["req"]
        return req

    def _try_send(self, message: Message) -> Optional[int]:
        """Sends a message with a fresh ``req`` and returns it; None if it could not be
        sent now. Raises :class:`Unencodable` for a message that can never be sent (the
        log sender then gives its lines up at once, logged): nothing else."""
        message = dict(message, req=self.conn.next_req())
        try:
            self.conn.send(message)
        except Unencodable:
            raise
        except HopperError as e:
            log.debug("cannot send %s: %s", message.get("type"), e)
            return None
        req: int = message["req"]
        return req

    def _send_outcome(self, message: Message) -> None:
        message = {k: v for k, v in message.items() if k != "req"}
        req = self._send(message)
        if req is None:
            # Dropped (logged): not listed in heartbeats, so the server runs the job again
            # once its lease runs out, rather than holding it for ever.
            return
        self._unacked[req] = (time.monotonic(), message)

    def _flush_outbox(self) -> None:
        while True:
            try:
                message = self._outbox.get_nowait()
            except queue.Empty:
                return
            self._send(message)

    def _report_results(self) -> None:
        while True:
            try:
                job, outcome = self._results.get_nowait()
            except queue.Empty:
                return
            self._running.pop(job.id, None)
            self._futures.pop(job.id, None)
            if job.cancelled.is_set():
                continue  # cancelled or lease lost: nothing to report
            # The attempt's log goes out just before its outcome (after the request of it in
            # flight, if any).
            self._logs.offer((job.id, job.attempt), job._take_log, time.monotonic(), last=True)
            outcome.update({"id": job.id, "attempt": job.attempt})
            self._send_outcome(outcome)

    def _send_due_logs(self, now: float) -> None:
        """Sends the lines of running jobs that are due (see :meth:`Job.log`), so that a
        worker that dies mid-attempt loses at most the last second of them."""
        for job in self._running.values():
            if job._log_due(now) and not job.cancelled.is_set():
                self._logs.offer((job.id, job.attempt), job._take_log, now)

    def _on_message(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "order":
            self._start(message.get("job"))
        elif kind == "cancel":
            cancelled = self._running.get(str(message.get("id")))
            if cancelled is not None:
                cancelled.cancelled.set()
        elif kind == "heartbeat_ack":
            for lease in message.get("lost") or []:
                if not isinstance(lease, dict):
                    continue
                lost = self._running.get(str(lease.get("id")))
                if lost is not None and lost.attempt == lease.get("attempt"):
                    lost.cancelled.set()
        elif kind == "ack":
            if self._logs.on_reply(message, time.monotonic()):
                return
            acked = message.get("req")
            if acked == self._bye_req:
                self._bye_req = None
            if isinstance(acked, int):
                self._unacked.pop(acked, None)
        elif kind == "error":
            code = message.get("code")
            req = message.get("req")
            if code == "unauthorized":
                self._rehello = True  # the server restarted and forgot this session
            if self._logs.on_reply(message, time.monotonic()) or code == "unauthorized":
                return  # a log request's answer, or a hello to say again (and the bye)
            if req is not None and req == self._bye_req:
                self._bye_req = None
                log.warning("bye refused: %s", message.get("message"))
            elif isinstance(req, int) and req in self._unacked and code != "internal":
                _, refused = self._unacked.pop(req)
                log.warning("outcome of %s refused: %s", refused.get("id"), message.get("message"))
            else:
                log.warning("server error %s: %s", code, message.get("message"))

    def _start(self, order: Any) -> None:
        """Runs one order on the pool (an order without a lease is logged and skipped); once
        the worker is stopping, hands it back instead (``released``)."""
        if not (isinstance(order, dict) and isinstance(order.get("id"), str)
                and isinstance(order.get("attempt"), int)):
            log.warning("skipped an order without a lease (id, attempt): %.200r", order)
            return
        job = Job(order, self)
        if self._stop.is_set():
            # Sent before the server read the bye: not started, as the held ones.
            self._send_outcome({"type": "released", "id": job.id, "attempt": job.attempt})
            return
        self._running[job.id] = job
        if self._pool is None:
            raise RuntimeError("an order arrived outside Worker.run()")
        self._futures[job.id] = self._pool.submit(self._run_job, job)

    def _release_unstarted(self) -> None:
        """Hands back the held orders no thread has started (``released``: available again
        at once, no attempt used)."""
        for job_id, future in list(self._futures.items()):
            if future.cancel():
                job = self._running.pop(job_id)
                del self._futures[job_id]
                self._send_outcome({"type": "released", "id": job.id, "attempt": job.attempt})

    def _run_job(self, job: Job) -> None:
        if job.cancelled.is_set():
            # Cancelled (or its lease lost) while held: never started, nothing to report.
            self._results.put((job, {"type": "completed"}))
            return
        started = time.monotonic()
        outcome: Message = {"type": "failed", "retryable": True,
                            "error": "the worker failed while running the handler"}
        try:
            outcome = self._attempt(job, started)
        except BaseException as e:
            # Whatever escaped (a SystemExit from the handler, a failing tracer), the attempt
            # gets an outcome: a job is never left held and heartbeated until its timeout.
            outcome["error"] = _error_text(e, f"the worker failed while running the handler: "
                                              f"{type(e).__name__}: ")
            outcome["duration_ms"] = int((time.monotonic() - started) * 1000)
            raise
        finally:
            self._results.put((job, outcome))

    def _attempt(self, job: Job, started: float) -> Message:
        """Runs the job's handler; returns the outcome to report."""
        handler = self.handlers.get(job.kind or "")
        with job_span(job) as span:
            try:
                if handler is None:
                    raise Permanent(f"no handler for kind {job.kind!r} on worker {self.name}")
                handler(job)
                outcome: Message = {"type": "completed"}
            except Snooze as s:
                try:
                    # Checked again: a Snooze whose delay was changed after it was made, or
                    # a subclass that skipped its checks, fails the attempt (counted, so it
                    # cannot loop) rather than being refused by the server.
                    delay_ms = seconds_ms(getattr(s, "delay", None), "Snooze delay")
                    outcome = {"type": "snoozed", "delay_ms": delay_ms}
                except (TypeError, ValueError) as e:
                    outcome = {"type": "failed", "error": _error_text(e, "invalid Snooze: "),
                               "retryable": True}
            except Permanent as e:
                outcome = {"type": "failed", "error": _error_text(e), "retryable": False}
            except Exception as e:  # noqa: BLE001 - any handler error fails the attempt
                outcome = {"type": "failed", "error": _error_text(e, f"{type(e).__name__}: "),
                           "retryable": True}
            if outcome["type"] in ("completed", "failed"):
                outcome["duration_ms"] = int((time.monotonic() - started) * 1000)
            span.ended(outcome)
        return outcome
