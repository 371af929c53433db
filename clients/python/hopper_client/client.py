"""Submitting, inspecting and cancelling jobs."""

import os
import time
import uuid

from ._connection import Connection, HopperError, Unavailable


def _job_spec(kind, args=None, **options):
    spec = {"kind": kind, "args": {} if args is None else args}
    for key in ("queue", "priority", "run_at", "delay_ms", "max_attempts", "timeout_ms"):
        value = options.pop(key, None)
        if value is not None:
            if key == "run_at" and hasattr(value, "isoformat"):
                value = value.isoformat()
            spec[key] = value
    if options:
        raise TypeError(f"unknown job options: {sorted(options)}")
    # The client picks the id, so a submit retried after a lost reply cannot insert twice.
    # The server accepts UUIDv7 only: ids sort by creation time.
    spec["id"] = _uuid7()
    return spec


def _uuid7():
    """A UUIDv7 (RFC 9562): 48 bits of Unix time in ms, then random bits."""
    raw = bytearray(int(time.time() * 1000).to_bytes(6, "big") + os.urandom(10))
    raw[6] = (raw[6] & 0x0F) | 0x70
    raw[8] = (raw[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(raw)))


class Client:
    """Submits and inspects jobs through a hopper server.

    ``token`` defaults to the ``HOPPER_TOKEN`` environment variable. Every call raises
    :class:`HopperError` (with ``.code``) when the server refuses it and
    :class:`Unavailable` when no reply comes within ``timeout`` seconds.
    """

    def __init__(self, endpoint, token=None, timeout=10.0, name=None):
        hello = {"role": "client"}
        if name:
            hello["name"] = name
        self._conn = Connection(endpoint, token=token, hello=hello, timeout=timeout)
        self._conn.reconnect(deadline=None if timeout is None else _deadline(timeout))

    def close(self):
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, type_, fields):
        try:
            return self._conn.call(type_, fields)
        except Unavailable:
            # The server may have restarted: a new socket and hello, then one more try.
            self._conn.reconnect(deadline=_deadline(self._conn.timeout))
            return self._conn.call(type_, fields)

    def submit(self, kind, args=None, **options):
        """Submits one job; returns its id (a string).

        Options: ``queue``, ``priority`` (int or "high"/"normal"/"low"), ``run_at``
        (datetime or RFC 3339 string), ``delay_ms``, ``max_attempts``, ``timeout_ms``.
        """
        spec = _job_spec(kind, args, **options)
        try:
            return self._call("submit", {"job": spec})["ids"][0]
        except HopperError as e:
            if e.code == "conflict":  # our own earlier try went through
                return spec["id"]
            raise

    def submit_batch(self, jobs):
        """Submits many jobs in one transaction (all or none). ``jobs`` holds dicts with
        ``kind``, ``args`` and any option of :meth:`submit`. Returns their ids."""
        specs = [_job_spec(**job) for job in jobs]
        return self._call("submit_batch", {"jobs": specs})["ids"]

    def status(self, job_id):
        """The job as a dict (``state``, ``attempt``, ``errors``, ...)."""
        return self._call("status", {"id": str(job_id)})["job"]

    def cancel(self, job_id):
        """Cancels a job that has not finished; returns it. ``HopperError`` with code
        ``conflict`` if it already finished."""
        return self._call("cancel", {"id": str(job_id)})["job"]

    # Admin requests (docs/protocol.md, "Admin requests"): what `hopper jobs`, `hopper
    # queues` and `hopper cron` do, through the server.

    def list_jobs(self, **filter):
        """Jobs, newest first, as dicts. Filters: ``queue``, ``state``, ``kind``,
        ``before`` (an id: the next, older page), ``created_after``, ``created_before``
        (RFC 3339 strings), ``limit`` (1 to 1000, default 20)."""
        filter = {k: str(v) if k == "before" else v for k, v in filter.items() if v is not None}
        return self._call("list_jobs", {"filter": filter})["jobs"]

    def retry(self, job_id):
        """Puts a failed or cancelled job back to available; returns it."""
        return self._call("retry", {"id": str(job_id)})["job"]

    def delete(self, job_id):
        """Deletes a job that is not running."""
        self._call("delete", {"id": str(job_id)})

    def retry_failed(self, queue=None, kind=None):
        """Retries every failed job (of ``queue`` and/or ``kind``); returns how many."""
        fields = {k: v for k, v in (("queue", queue), ("kind", kind)) if v is not None}
        return self._call("retry_failed", fields)["count"]

    def clear(self, queue=None):
        """Deletes every job that is not running (of ``queue``); returns how many."""
        return self._call("clear", {} if queue is None else {"queue": queue})["count"]

    def queue_stats(self):
        """Counts by queue and state, as a list of dicts."""
        return self._call("queue_stats", {})["queues"]

    def queues(self):
        """Every queue that has settings (paused, limits), as a list of dicts."""
        return self._call("list_queues", {})["queues"]

    def update_queue(self, queue, **change):
        """Changes a queue's settings: ``paused``, ``max_running``,
        ``max_running_per_group``, ``rate`` ({"jobs", "per_ms"}); ``None`` removes a
        limit. Returns the settings now stored."""
        return self._call("update_queue", {"update": dict(change, queue=queue)})["queue"]

    def cron(self):
        """The registered periodic jobs, as a list of dicts."""
        return self._call("list_cron", {})["entries"]


def _deadline(timeout):
    import time

    return time.monotonic() + timeout
