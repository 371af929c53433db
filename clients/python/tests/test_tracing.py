"""One trace from a Rust enqueue to a Python worker, through `hopper serve`.

`hopper enqueue` (the binary built with the `otel` feature) exports its `hopper.enqueue`
span and its metrics over OTLP/HTTP to a receiver started here, which decodes them with
the maintained protobuf classes of `opentelemetry-proto`; the job's meta carries the
W3C trace context through the database and the server to this process's worker, whose
`hopper.job` span (captured with the Python SDK's in-memory exporter) must be a child of
that enqueue span, in the same trace.
"""

import http.server
import os
import subprocess
import threading

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.proto")

from opentelemetry import trace  # noqa: E402
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # noqa: E402
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from conftest import DATABASE_URL, hopper_bin, wait  # noqa: E402
from hopper_client import Worker  # noqa: E402


class Receiver:
    """An OTLP/HTTP endpoint (protobuf) on a free port: keeps every span and metric name."""

    def __init__(self):
        self.spans = []
        self.metrics = set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/traces":
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    receiver.took_spans(request)
                    reply = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    receiver.took_metrics(request)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_error(404)
                    return
                payload = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def took_spans(self, request):
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "")
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {a.key: a.value for a in span.attributes}
                        self.spans.append({
                            "service": service, "name": span.name,
                            "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(), "kind": span.kind,
                            "attributes": attributes})

    def took_metrics(self, request):
        with self.lock:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    self.metrics.update(m.name for m in scope_metrics.metrics)

    def close(self):
        self.server.shutdown()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def python_spans():
    """This process's tracer provider, exporting to memory (set once per process)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def test_a_rust_enqueue_and_a_python_run_are_one_trace(server, receiver, python_spans):
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOPPER_SCHEMA=server.schema,
               OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SERVICE_NAME="signup-api",
               HOPPER_LOG="warn")
    out = subprocess.run([hopper_bin(), "enqueue", "--kind", "welcome", "--args", '{"user": 7}'],
                         env=env, check=True, capture_output=True, text=True, timeout=60)
    job_id = out.stdout.strip()

    wait(lambda: any(s["name"] == "hopper.enqueue" for s in receiver.spans), timeout=30,
         what="the enqueue span at the OTLP receiver (is the binary built with `otel`?)")
    enqueue = next(s for s in receiver.spans if s["name"] == "hopper.enqueue")
    assert enqueue["service"] == "signup-api"
    assert enqueue["kind"] == 4  # SPAN_KIND_PRODUCER
    assert enqueue["attributes"]["kind"].string_value == "welcome"
    assert "hopper_jobs_enqueued_total" in receiver.metrics, receiver.metrics

    seen = []
    worker = Worker(server.endpoint, token=server.token, concurrency=1,
                    handlers={"welcome": lambda job: seen.append(job.meta)})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait(lambda: any(s.name == "hopper.job" for s in python_spans.get_finished_spans()),
         timeout=30, what="the Python worker's job span")
    worker.stop()
    thread.join(timeout=30)

    assert seen and seen[0]["traceparent"].split("-")[1] == enqueue["trace_id"], seen
    job = next(s for s in python_spans.get_finished_spans() if s.name == "hopper.job")
    assert format(job.context.trace_id, "032x") == enqueue["trace_id"], "one trace end to end"
    assert job.parent is not None and format(job.parent.span_id, "016x") == enqueue["span_id"]
    assert job.kind == trace.SpanKind.CONSUMER
    assert job.attributes["job_id"] == job_id
    assert job.attributes["outcome"] == "completed"
