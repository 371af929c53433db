"""The OpenAPI document against the running server: schemathesis drives `hopper serve --http`.

A fresh schema is migrated and seeded with a few jobs (one in each state but running, two
queues, a group, a unique key), `hopper serve --http 127.0.0.1:0` serves it with an admin
token, and schemathesis (`st run`) sends every operation of the served
`/api/v1/openapi.json` valid and invalid data: examples, coverage (boundary and
schema-violating values) and fuzzing, a bounded number of cases per operation, with the
checks not_a_server_error, status_code_conformance, content_type_conformance and
response_schema_conformance. Any failure fails the test, with schemathesis's report
(and a JUnit file under $HOPPER_ARTIFACTS, default target/api-artifacts).

Needs: `pip install schemathesis pytest`, PostgreSQL at $DATABASE_URL, and the binary at
$HOPPER_BIN (default target/debug/hopper). Run: python3 -m pytest -q tests/api
Knobs: HOPPER_ST_EXAMPLES (cases per operation and phase, default 40), HOPPER_ST_SEED.
"""

import json
import os
import re
import shutil
import subprocess
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOPPER = os.environ.get("HOPPER_BIN", str(ROOT / "target" / "debug" / "hopper"))
DATABASE_URL = os.environ.get(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
)
ARTIFACTS = Path(os.environ.get("HOPPER_ARTIFACTS", ROOT / "target" / "api-artifacts"))
TOKEN = "schemathesis-admin-" + uuid.uuid4().hex
EXAMPLES = os.environ.get("HOPPER_ST_EXAMPLES", "40")
SEED = os.environ.get("HOPPER_ST_SEED", "20261122")
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
    ]
)


def run(*command, stdin=None):
    """Runs a command to completion (hopper or psql), failing the test if it fails."""
    subprocess.run(command, input=stdin, check=True, capture_output=True, text=True, timeout=120)


def psql(sql):
    run("psql", DATABASE_URL, "-v", "ON_ERROR_STOP=1", "-q", stdin=sql)


def seed_sql(schema: str) -> str:
    """Jobs in every state but running, a group and a unique key."""
    return f"""
    INSERT INTO {schema}.jobs (id, queue, kind, args, state, attempt, run_at, attempted_at, finished_at, duration_ms)
    SELECT {schema}.uuid_v7(), 'mail', 'send_email', jsonb_build_object('n', i), 'completed', 1,
           now() - interval '2 min', now() - interval '2 min', now() - interval '1 min', 15
    FROM generate_series(1, 3) AS i;
    INSERT INTO {schema}.jobs (id, queue, kind, state, attempt, max_attempts, finished_at, errors)
    VALUES ({schema}.uuid_v7(), 'mail', 'send_email', 'failed', 1, 1, now(),
            jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', 'boom',
                                                 'node', NULL, 'duration_ms', 3)));
    INSERT INTO {schema}.jobs (id, queue, kind, state, finished_at)
    VALUES ({schema}.uuid_v7(), 'mail', 'send_email', 'cancelled', now());
    INSERT INTO {schema}.jobs (id, queue, kind, state, run_at)
    VALUES ({schema}.uuid_v7(), 'default', 'report', 'scheduled', now() + interval '1 day');
    """


class Server:
    """`hopper serve --http 127.0.0.1:0` on `schema`: its URL once it listens, and its log
    (read all along on a thread, since a full pipe would stall it)."""

    def __init__(self, schema):
        env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOPPER_HTTP_ADMIN_TOKENS=TOKEN)
        env["HOPPER_LOG"] = "warn"
        for name in ("HOPPER_HTTP_READ_TOKENS", "HOPPER_LISTEN"):
            env.pop(name, None)
        self.log = []
        self.url = None
        self.listening = threading.Event()
        self.proc = subprocess.Popen(
            [HOPPER, "--schema", schema, "serve", "--http", "127.0.0.1:0"],
            env=env, stderr=subprocess.PIPE, text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line)
            found = re.search(r"dashboard on (http://127\.0\.0\.1:\d+)/", line)
            if found and not self.url:
                self.url = found.group(1)
                self.listening.set()
        self.listening.set()  # it exited: stop waiting

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "server.log").write_text("".join(self.log))


@pytest.fixture
def server():
    """A seeded schema and a server over it, with one admin token."""
    schema = "api_" + uuid.uuid4().hex[:12]
    run(HOPPER, "--database-url", DATABASE_URL, "--schema", schema, "migrate")
    psql(seed_sql(schema))
    served = Server(schema)
    try:
        served.listening.wait(timeout=60)
        assert served.url, "hopper serve did not start:\n" + "".join(served.log)
        yield served
    finally:
        served.stop()
        psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def api(url, path, body=None, method=None):
    request = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def test_the_served_document_is_the_checked_in_one(server):
    served = json.loads(urllib.request.urlopen(server.url + "/api/v1/openapi.json").read())
    checked_in = json.loads((ROOT / "crates" / "hopper-web" / "openapi.json").read_text())
    assert served == checked_in


def test_every_operation_conforms_to_the_openapi_document(server):
    url = server.url
    # A grouped job with a unique key and limits on one queue, through the API itself.
    api(url, "/api/v1/jobs", {"kind": "sync", "queue": "tenants", "group": "t-1", "unique_key": "sync:t-1"})
    api(url, "/api/v1/queues/tenants/limits", {"max_running": 4, "rate": "50/s"}, method="PATCH")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    st = shutil.which("st") or "st"
    command = [
        st,
        "run",
        url + "/api/v1/openapi.json",
        "--url",
        url,
        "--header",
        "Authorization: Bearer " + TOKEN,
        "--checks",
        CHECKS,
        "--mode",
        "all",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        EXAMPLES,
        "--seed",
        SEED,
        # One worker: hypothesis describes filters with ast.parse, which CPython 3.11 does
        # not allow from two threads at once ("AST constructor recursion depth mismatch").
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--suppress-health-check",
        "too_slow,filter_too_much",
        "--report",
        "junit",
        "--report-dir",
        str(ARTIFACTS),
        "--output-truncate",
        "false",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    report = run.stdout + run.stderr
    (ARTIFACTS / "schemathesis.txt").write_text(report)
    server_log = "".join(server.log)
    assert run.returncode == 0, report[-20000:] + "\n\nserver log:\n" + server_log[-5000:]
