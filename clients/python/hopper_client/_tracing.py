"""Continues a job's trace with OpenTelemetry, when the ``opentelemetry-api`` package is
installed (the ``otel`` extra): each job runs inside a ``hopper.job`` span (kind CONSUMER)
whose parent is the W3C trace context stored in the job's ``meta`` by whoever enqueued it
(``meta["traceparent"]``, ``meta["tracestate"]``), so the enqueue and the run are one trace.
The application configures the SDK and its exporter as usual (a ``TracerProvider``); with
none configured, OpenTelemetry's API records nothing. Without the package, jobs run as
before.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional

try:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - the extra is not installed
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .worker import Job

#: The meta keys of the W3C trace context.
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"


class JobSpan:
    """What the worker records on a job's span: how the attempt ended."""

    def __init__(self, span: Optional[Any]) -> None:
        self._span = span

    def ended(self, outcome: Mapping[str, Any]) -> None:
        """Records the outcome message (``completed``, ``failed``, ``snoozed``)."""
        if self._span is None:
            return
        kind = outcome.get("type", "")
        label = {"failed": "retry" if outcome.get("retryable") else "failed"}.get(kind, kind)
        self._span.set_attribute("outcome", label)
        if "duration_ms" in outcome:
            self._span.set_attribute("duration_ms", float(outcome["duration_ms"]))
        if kind == "failed":
            error = str(outcome.get("error", ""))
            self._span.set_attribute("error", error)
            self._span.set_status(Status(StatusCode.ERROR, error))


def carrier(meta: Any) -> dict[str, str]:
    """The trace context of a job's ``meta`` (string values only)."""
    if not isinstance(meta, Mapping):
        return {}
    return {k: v for k in (TRACEPARENT, TRACESTATE) if isinstance(v := meta.get(k), str)}


@contextlib.contextmanager
def job_span(job: "Job") -> Iterator[JobSpan]:
    """Runs the body inside the job's ``hopper.job`` span (a no-op without OpenTelemetry)."""
    if trace is None:
        yield JobSpan(None)
        return
    parent = TraceContextTextMapPropagator().extract(carrier(job.meta))
    tracer = trace.get_tracer("hopper_client")
    attributes: dict[str, str | int] = {"job_id": job.id, "attempt": job.attempt, "queue": job.queue or "",
                  "kind": job.kind or ""}
    with tracer.start_as_current_span("hopper.job", context=parent, kind=SpanKind.CONSUMER,
                                      attributes=attributes,
                                      record_exception=False, set_status_on_exception=False
                                      ) as span:
        yield JobSpan(span)
