"""One trace from a Rust enqueue to a Python worker, through `hopper serve`.

`hopper enqueue` (the binary built with the `otel` feature) exports its `hopper.enqueue`
span and its metrics over OTLP/HTTP to a receiver started here, which decodes them with
the maintained protobuf classes of `opentelemetry-proto`; the job's meta carries the
W3C trace context through the database and the server to this process's worker, whose
`hopper.job` span (captured with the Python SDK's in-memory exporter) must be a child of
that enqueue span, in the same trace. `hopper worker` exports the queue gauges of
`/metrics` to the same receiver. Over HTTPS, the receiver's certificate is checked
against `OTEL_EXPORTER_OTLP_CERTIFICATE` (a CA the test makes with the `openssl` tool).
"""

import http.server
import os
import signal
import ssl
import subprocess
import threading
import time

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

from conftest import DATABASE_URL, Server, hopper_bin, wait  # noqa: E402
from hopper_client import Client, Worker  # noqa: E402


class Receiver:
    """An OTLP/HTTP endpoint (protobuf) on a free port: keeps every span, metric name and
    gauge value (by name and attributes). Over TLS with `tls=(certificate, key)`."""

    def __init__(self, tls=None):
        self.spans = []
        self.metrics = set()
        self.gauges = {}
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

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a refused handshake (the wrong-CA case) is expected

        self.server = Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.endpoint = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
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
                    for metric in scope_metrics.metrics:
                        self.metrics.add(metric.name)
                        for point in metric.gauge.data_points:
                            labels = frozenset((a.key, a.value.string_value)
                                               for a in point.attributes)
                            value = (point.as_int if point.HasField("as_int")
                                     else point.as_double)
                            self.gauges[(metric.name, labels)] = value

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

    # The queue gauges, from a `hopper worker` of another queue while the job waits.
    gauge_env = dict(env, OTEL_SERVICE_NAME="hopper-worker", OTEL_TRACES_EXPORTER="none",
                     OTEL_METRIC_EXPORT_INTERVAL="200")
    worker_proc = subprocess.Popen([hopper_bin(), "worker", "--queue", "elsewhere"],
                                   env=gauge_env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
    try:
        available = ("hopper_jobs", frozenset({("queue", "default"), ("state", "available")}))
        wait(lambda: available in receiver.gauges, timeout=30,
             what="hopper_jobs over OTLP from `hopper worker`")
        assert receiver.gauges[available] == 1, receiver.gauges
        running = ("hopper_jobs", frozenset({("queue", "default"), ("state", "running")}))
        assert receiver.gauges[running] == 0, receiver.gauges
        oldest = ("hopper_queue_oldest_available_seconds", frozenset({("queue", "default")}))
        assert receiver.gauges[oldest] >= 0, receiver.gauges
    finally:
        worker_proc.send_signal(signal.SIGTERM)
        _, errors = worker_proc.communicate(timeout=30)
    assert worker_proc.returncode == 0, errors

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


def test_a_rust_worker_exports_one_job_span_per_attempt_in_the_enqueue_trace(schema, receiver):
    """`hopper worker` (Rust, OTLP to the receiver) runs a job that `hopper enqueue` put in a
    trace: its attempt is one `hopper.job` span (made by the middleware with the SDK's
    tracer; the `tracing` bridge leaves that span out), in the given trace beside the CLI's
    enqueue span."""
    env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOPPER_SCHEMA=schema, HOPPER_LOG="warn",
               OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_METRICS_EXPORTER="none",
               OTEL_BSP_SCHEDULE_DELAY="100")
    subprocess.run([hopper_bin(), "migrate"], env=env, check=True, capture_output=True,
                   timeout=60)
    trace_id, parent_id = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
    out = subprocess.run([hopper_bin(), "enqueue", "--queue", "bench", "--kind", "bench",
                          "--args", '{"n": 1}', "--traceparent",
                          f"00-{trace_id}-{parent_id}-01"],
                         env=dict(env, OTEL_SERVICE_NAME="signup-api"), check=True,
                         capture_output=True, text=True, timeout=60)
    job_id = out.stdout.strip()
    worker_proc = subprocess.Popen([hopper_bin(), "worker", "--queue", "bench"],
                                   env=dict(env, OTEL_SERVICE_NAME="hopper-worker",
                                            HOPPER_TRACE="hopper::spans=debug"),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True)
    try:
        wait(lambda: any(s["name"] == "hopper.job" for s in receiver.spans), timeout=30,
             what="the Rust worker's job span at the OTLP receiver")
    finally:
        worker_proc.send_signal(signal.SIGTERM)
        _, errors = worker_proc.communicate(timeout=30)
    assert worker_proc.returncode == 0, errors

    enqueue = next(s for s in receiver.spans
                   if s["name"] == "hopper.enqueue" and s["service"] == "signup-api")
    jobs = [s for s in receiver.spans if s["name"] == "hopper.job"]
    assert len(jobs) == 1, jobs
    job = jobs[0]
    assert job["service"] == "hopper-worker"
    assert job["trace_id"] == trace_id == enqueue["trace_id"], "one trace end to end"
    # A job given a traceparent keeps it: the attempt and the CLI's enqueue span are both
    # children of the given span.
    assert job["parent_span_id"] == parent_id == enqueue["parent_span_id"]
    assert job["kind"] == 5  # SPAN_KIND_CONSUMER
    assert job["attributes"]["job_id"].string_value == job_id
    assert job["attributes"]["outcome"].string_value == "completed"
    assert job["attributes"]["attempt"].int_value == 1


def make_certificates(directory):
    """A CA, a certificate for 127.0.0.1 that it signed, and another CA that signed
    nothing: made with the `openssl` tool."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    for ca in ("ca", "wrong-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                "-subj", f"/CN=hopper test {ca}")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "receiver.key", "-out", "receiver.csr", "-subj", "/CN=127.0.0.1")
    (directory / "receiver.ext").write_text(
        "subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n"
        "extendedKeyUsage = serverAuth\n")
    openssl("x509", "-req", "-in", "receiver.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "receiver.pem", "-days", "2",
            "-extfile", "receiver.ext")
    return {name: str(directory / name)
            for name in ("ca.pem", "wrong-ca.pem", "receiver.pem", "receiver.key")}


def test_an_https_collector_with_its_ca_and_a_given_traceparent(schema, tmp_path,
                                                                 monkeypatch):
    """`hopper enqueue` and `hopper serve` export to an HTTPS receiver whose certificate
    their CA file vouches for; the CLI's `hopper.enqueue` span is a child of the
    `--traceparent` it was given, and the server's span of a submission a child of the
    submission's `meta.traceparent`. With another CA the export is refused: the enqueue
    still succeeds, the reason is logged."""
    files = make_certificates(tmp_path)
    receiver = Receiver(tls=(files["receiver.pem"], files["receiver.key"]))
    otel = dict(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
                OTEL_EXPORTER_OTLP_CERTIFICATE=files["ca.pem"], OTEL_METRICS_EXPORTER="none",
                OTEL_BSP_SCHEDULE_DELAY="100")
    for name, value in otel.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "hopper-serve")
    server = Server(schema, tmp_path).start()
    try:
        trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
        env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOPPER_SCHEMA=schema,
                   OTEL_SERVICE_NAME="signup-api", HOPPER_LOG="warn")
        subprocess.run([hopper_bin(), "enqueue", "--kind", "welcome",
                        "--traceparent", f"00-{trace_id}-{parent_id}-01"],
                       env=env, check=True, capture_output=True, text=True, timeout=60)
        submitted_parent = "b7ad6b7169203331"
        with Client(server.endpoint, token=server.token) as client:
            client.submit("welcome", {}, meta={
                "traceparent": f"00-{trace_id}-{submitted_parent}-01"})

        def enqueue_span(service):
            return next((s for s in receiver.spans
                         if s["name"] == "hopper.enqueue" and s["service"] == service), None)

        wait(lambda: enqueue_span("signup-api") and enqueue_span("hopper-serve"), timeout=30,
             what="the enqueue spans of the CLI and the server at the HTTPS receiver")
        cli, serve = enqueue_span("signup-api"), enqueue_span("hopper-serve")
        assert cli["trace_id"] == trace_id, "the span joins the given trace"
        assert cli["parent_span_id"] == parent_id, "a child of the given span"
        assert serve["trace_id"] == trace_id, "the submission's trace"
        assert serve["parent_span_id"] == submitted_parent, "a child of the submitter's span"
        assert serve["kind"] == 4  # SPAN_KIND_PRODUCER
        accepted = len(receiver.spans)

        refused = dict(env, OTEL_EXPORTER_OTLP_CERTIFICATE=files["wrong-ca.pem"])
        started = time.monotonic()
        out = subprocess.run([hopper_bin(), "enqueue", "--kind", "welcome"], env=refused,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert time.monotonic() - started < 20, "a refused collector does not hold the CLI"
        assert "OpenTelemetry export failed" in out.stderr, out.stderr
        assert "UnknownIssuer" in out.stderr, out.stderr
        assert len(receiver.spans) == accepted, "nothing was accepted without the right CA"
    finally:
        server.kill(signal.SIGTERM)
        receiver.close()
