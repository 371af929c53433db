"""Submitting, inspecting and cancelling jobs."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from types import TracebackType
from typing import Any, Dict, Iterable, List, Mapping, Optional, Type, Union

from ._connection import Connection, HopperError, Message, Unavailable
from ._uuid7 import uuid7
from ._values import MAX_DURATION_MS, integer, json_value, optional_str, rfc3339, text

#: A job's arguments: a JSON-compatible map or array.
Args = Union[Mapping[str, Any], List[Any]]

_OPTIONS = ("queue", "priority", "run_at", "delay_ms", "max_attempts", "timeout_ms", "meta")
_MAX_INT32 = 2**31 - 1
#: The most jobs one ``submit_batch`` holds (the server refuses more).
MAX_BATCH_JOBS = 10_000
#: The settings ``update_queue`` changes (docs/protocol.md, "Admin requests").
_QUEUE_SETTINGS = ("paused", "max_running", "max_running_per_group", "rate")


def _option(key: str, value: Any) -> Any:
    """A job option as sent, or TypeError/ValueError saying what is wrong with it (the ranges
    of docs/protocol.md §3)."""
    if key == "queue":
        return optional_str(value, "queue")
    if key == "priority":
        if isinstance(value, str):
            return text(value, "priority")
        return integer(value, "priority (an int or \"high\", \"normal\", \"low\")",
                       -32768, 32767)
    if key == "run_at":
        return rfc3339(value, "run_at")
    if key == "delay_ms":
        return integer(value, "delay_ms", 0, MAX_DURATION_MS)
    if key in ("max_attempts", "timeout_ms"):
        return integer(value, key, 1, _MAX_INT32)
    return json_value(value, key)  # meta: its shape is the server's to check


def _job_spec(kind: str, args: Optional[Args] = None, **options: Any) -> Message:
    spec: Message = {"kind": text(kind, "kind"),
                     "args": {} if args is None else json_value(args, "args")}
    for key in _OPTIONS:
        value = options.pop(key, None)
        if value is not None:
            spec[key] = _option(key, value)
    if options:
        raise TypeError(f"unknown job options: {sorted(options)}")
    # The client picks the id, so a submit retried after a lost reply cannot insert twice.
    # UUIDv7, increasing: listing is newest first by id, and a batch runs in this order.
    spec["id"] = uuid7()
    return spec


class Client:
    """Submits and inspects jobs through a hopper server.

    ``token`` defaults to the ``HOPPER_TOKEN`` environment variable; ``server_key`` (the
    server's CURVE public key, 40 Z85 characters) to ``HOPPER_SERVER_KEY``, and encrypts the
    connection when given. Every call raises :class:`HopperError` (with ``.code``) when the
    server refuses it and :class:`Unavailable` when no reply comes within ``timeout``
    seconds.
    """

    def __init__(
        self,
        endpoint: str,
        token: Optional[str] = None,
        timeout: float = 10.0,
        name: Optional[str] = None,
        server_key: Optional[str] = None,
    ) -> None:
        hello: Message = {"role": "client"}
        if name:
            hello["name"] = text(name, "name")
        self._conn = Connection(
            endpoint, token=token, hello=hello, timeout=timeout, server_key=server_key
        )
        self._conn.reconnect(deadline=_deadline(timeout))

    def close(self) -> None:
        """Closes the connection."""
        self._conn.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _call(self, type_: str, fields: Message) -> Message:
        try:
            return self._conn.call(type_, fields)
        except Unavailable:
            # The server may have restarted: a new socket and hello, then one more try.
            self._conn.reconnect(deadline=_deadline(self._conn.timeout))
            return self._conn.call(type_, fields)

    def submit(self, kind: str, args: Optional[Args] = None, **options: Any) -> str:
        """Submits one job; returns its id (a string).

        Options: ``queue``, ``priority`` (int or "high"/"normal"/"low"), ``run_at``
        (a timezone-aware datetime or RFC 3339 string), ``delay_ms``, ``max_attempts``,
        ``timeout_ms``, ``meta``. ``args`` and ``meta`` must be JSON-compatible (dicts
        with str keys, lists, str, finite numbers, bools, None): a datetime, UUID, set,
        Decimal, bytes... raises TypeError before anything is sent, as does an option of
        the wrong type or an unknown one; a naive datetime, a value out of the protocol's
        range or text holding a lone surrogate (which UTF-8 cannot encode) raises
        ValueError naming where it is.
        """
        spec = _job_spec(kind, args, **options)
        try:
            return str(self._call("submit", {"job": spec})["ids"][0])
        except HopperError as e:
            if e.code == "conflict":  # our own earlier try went through
                return str(spec["id"])
            raise

    def submit_batch(self, jobs: Iterable[Mapping[str, Any]]) -> List[str]:
        """Submits many jobs in one transaction (all or none). ``jobs`` holds dicts with
        ``kind``, ``args`` and any option of :meth:`submit`, at most :data:`MAX_BATCH_JOBS`
        (10,000: the server's bound; more raise ValueError before anything is sent, so
        submit larger ones in several batches). Returns their ids, in order; jobs of one
        priority run in that order. An iterator is read no further than one job past the
        bound."""
        taken = list(itertools.islice(jobs, MAX_BATCH_JOBS + 1))
        if len(taken) > MAX_BATCH_JOBS:
            raise ValueError(f"a batch holds at most {MAX_BATCH_JOBS:,} jobs, got "
                             f"{len(taken):,} or more: submit larger ones in several batches")
        specs = [_job_spec(**job) for job in taken]
        return [str(i) for i in self._call("submit_batch", {"jobs": specs})["ids"]]

    def status(self, job_id: str) -> Message:
        """The job as a dict (``state``, ``attempt``, ``errors``, ...)."""
        job: Message = self._call("status", {"id": _job_id(job_id)})["job"]
        return job

    def job_logs(self, job_id: str) -> List[Message]:
        """Each attempt's log of the job, oldest attempt first: dicts with ``attempt``,
        ``lines`` (each with ``at``, ``level``, ``message`` and, when it has some,
        ``fields``) and ``dropped`` (lines past the attempt's 64 KiB, not kept). Reads the
        server's pages (``job_logs``, 8 attempts each) until the last. ``HopperError`` with
        code ``not_found`` when there is no such job."""
        logs: List[Message] = []
        after = 0
        while True:
            reply = self._call("job_logs", {"id": _job_id(job_id), "after": after})
            logs.extend(reply["logs"])
            following = reply.get("next")
            # A cursor that does not move on would loop for ever.
            if not isinstance(following, int) or following <= after:
                return logs
            after = following

    def cancel(self, job_id: str) -> Message:
        """Cancels a job that has not finished; returns it. ``HopperError`` with code
        ``conflict`` if it already finished."""
        job: Message = self._call("cancel", {"id": _job_id(job_id)})["job"]
        return job

    # Admin requests (docs/protocol.md, "Admin requests"): what `hopper jobs`, `hopper
    # queues`, `hopper cron` and `hopper nodes` do, through the server.

    def list_jobs(
        self,
        *,
        queue: Optional[str] = None,
        state: Optional[str] = None,
        kind: Optional[str] = None,
        group: Optional[str] = None,
        meta: Optional[Dict[str, Any]] = None,
        before: Optional[str] = None,
        created_after: Union[datetime, str, None] = None,
        created_before: Union[datetime, str, None] = None,
        limit: Optional[int] = None,
    ) -> List[Message]:
        """Jobs, newest first, as dicts. Filters: ``queue``, ``state``, ``kind``,
        ``group``, ``meta`` (a dict: only jobs whose metadata holds each of its keys with
        its value), ``before`` (an id: the next, older page), ``created_after``,
        ``created_before`` (timezone-aware datetimes or RFC 3339 strings), ``limit`` (1 to
        1000, default 20). An unknown filter is TypeError, a naive datetime ValueError.

        A listed job's ``args`` or ``meta`` larger than 4 KiB is left out: it is None and
        ``args_bytes`` / ``meta_bytes`` give its size (:meth:`status` reads the job whole).
        The server cuts a reply that would pass its frame size and says where to go on;
        this method goes on until ``limit`` jobs are there or none are left."""
        wanted: Message = {}
        for key, value in (("queue", queue), ("state", state), ("kind", kind),
                           ("group", group)):
            if value is not None:
                wanted[key] = optional_str(value, key)
        if meta is not None:
            wanted["meta"] = json_value(meta, "meta")
        if before is not None:
            wanted["before"] = text(str(before), "before")
        for key, instant in (("created_after", created_after),
                             ("created_before", created_before)):
            if instant is not None:
                wanted[key] = rfc3339(instant, key)
        if limit is not None:
            wanted["limit"] = integer(limit, "limit", 1, 1000)
        left = wanted.get("limit", 20)
        jobs: List[Message] = []
        while True:
            reply = self._call("list_jobs", {"filter": dict(wanted, limit=left)})
            page: List[Message] = reply["jobs"]
            jobs.extend(page)
            left -= len(page)
            following = reply.get("next_before")
            if following is None or not page or left <= 0:
                return jobs
            wanted["before"] = following

    def retry(self, job_id: str) -> Message:
        """Puts a failed or cancelled job back to available; returns it."""
        job: Message = self._call("retry", {"id": _job_id(job_id)})["job"]
        return job

    def delete(self, job_id: str) -> None:
        """Deletes a job that is not running."""
        self._call("delete", {"id": _job_id(job_id)})

    def retry_failed(self, queue: Optional[str] = None, kind: Optional[str] = None) -> int:
        """Retries every failed job (of ``queue`` and/or ``kind``); returns how many."""
        fields = {k: text(v, k) for k, v in (("queue", queue), ("kind", kind)) if v is not None}
        return int(self._call("retry_failed", fields)["count"])

    def clear(self, queue: Optional[str] = None) -> int:
        """Deletes every job that is not running (of ``queue``); returns how many."""
        fields = {} if queue is None else {"queue": text(queue, "queue")}
        return int(self._call("clear", fields)["count"])

    def queue_stats(self) -> List[Message]:
        """Counts by queue and state, as a list of dicts."""
        queues: List[Message] = self._call("queue_stats", {})["queues"]
        return queues

    def queues(self) -> List[Message]:
        """Every queue that has settings (paused, limits), as a list of dicts."""
        queues: List[Message] = self._call("list_queues", {})["queues"]
        return queues

    def update_queue(self, queue: str, **change: Any) -> Message:
        """Changes a queue's settings: ``paused``, ``max_running``,
        ``max_running_per_group``, ``rate`` ({"jobs", "per_ms"}); ``None`` removes a
        limit. Returns the settings now stored. An unknown setting is TypeError."""
        unknown = sorted(set(change) - set(_QUEUE_SETTINGS))
        if unknown:
            raise TypeError(f"unknown queue settings: {unknown} (expected some of"
                            f" {', '.join(_QUEUE_SETTINGS)})")
        update = json_value(change, "the queue settings")
        update["queue"] = optional_str(queue, "queue")
        stored: Message = self._call("update_queue", {"update": update})[
            "queue"
        ]
        return stored

    def cron(self) -> List[Message]:
        """The registered periodic jobs, as a list of dicts."""
        entries: List[Message] = self._call("list_cron", {})["entries"]
        return entries

    def nodes(self, *, before: Optional[str] = None, limit: Optional[int] = None) -> Message:
        """One page of the registered nodes (runtimes and servers) by name, as a dict:
        ``nodes`` (dicts with ``id``, ``name``, ``queues``, ``concurrency``,
        ``started_at``, ``heartbeat_at``) and ``next_before``, the ``before`` of the next
        page (None on the last). Paged as :meth:`list_jobs` is: ``before`` (the previous
        page's ``next_before``), ``limit`` (1 to 1000, default 20). A cursor that is not
        one is the server's ``invalid``."""
        wanted: Message = {}
        if before is not None:
            wanted["before"] = text(before, "before")
        if limit is not None:
            wanted["limit"] = integer(limit, "limit", 1, 1000)
        reply = self._call("list_nodes", wanted)
        # A server that predates paging answers every node, without a cursor.
        return {"nodes": reply["nodes"], "next_before": reply.get("next_before")}

    def job_stats(self, minutes: int = 60) -> List[Message]:
        """What finished in each minute of the last ``minutes`` (1 to 1440), oldest first,
        as a list of dicts (``minute``, ``completed``, ``failed``, latencies and durations
        in milliseconds); minutes in which nothing finished are left out."""
        # The range is the server's to check (its error says it); the type is checked here.
        minutes = integer(minutes, "minutes", -(2**31), _MAX_INT32)
        stats: List[Message] = self._call("job_stats", {"minutes": minutes})["minutes"]
        return stats


def _job_id(job_id: Any) -> str:
    """A job id as sent: ``str(job_id)`` (a UUID is taken too), ValueError if that holds a
    lone surrogate."""
    return text(str(job_id), "id")


def _deadline(timeout: float) -> float:
    return time.monotonic() + timeout
