"""Fixtures: the real `hopper serve` binary against PostgreSQL, one schema per test."""

import collections
import contextlib
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]

DATABASE_URL = os.environ.get("HOPPER_TEST_DATABASE_URL") or os.environ.get(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def hopper_bin():
    path = os.environ.get("HOPPER_BIN") or str(ROOT / "target" / "debug" / "hopper")
    if not os.path.exists(path):
        pytest.fail(f"the hopper binary is not at {path}: run `cargo build -p hopper-cli` "
                    "or set HOPPER_BIN")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(sql):
    out = subprocess.run(["psql", DATABASE_URL, "-XtAq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


class Server:
    """One `hopper serve` process; `kill()` and `start()` again for restarts."""

    def __init__(self, schema, tmp_path, extra=(), log_filter=None):
        self.schema = schema
        #: The server's HOPPER_LOG filter: the tests' HOPPER_LOG, or warn.
        self.log_filter = log_filter or os.environ.get("HOPPER_LOG", "warn")
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.token_file = tmp_path / "token"
        self.log = tmp_path / "server.log"
        self.extra = list(extra)
        self.proc = None
        #: The CURVE public key the server printed on start (None in plaintext).
        self.server_key = None

    def start(self):
        env = dict(os.environ, DATABASE_URL=DATABASE_URL, HOPPER_SCHEMA=self.schema,
                   HOPPER_LOG=self.log_filter)
        args = [hopper_bin(), "serve", "--listen", self.endpoint,
                "--heartbeat", "300ms", "--lease", "5s"]
        if "--insecure-no-auth" not in self.extra:
            args += ["--token-file", str(self.token_file)]
        log = open(self.log, "a")
        self.proc = subprocess.Popen(args + self.extra, env=env, stderr=log,
                                     stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if "listening on " + self.endpoint in text:
                key = SERVER_KEY.search(text)
                self.server_key = key.group(1) if key else None
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"hopper serve exited: {self.log.read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"hopper serve did not start: {self.log.read_text()}")

    @property
    def token(self):
        for line in self.token_file.read_text().splitlines():
            if line and not line.startswith("#"):
                return line.strip()
        return None

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        # A new log section, so start() waits for the new "listening" line.
        self.log.write_text("")

    def counts(self):
        rows = psql(f"SELECT state, count(*) FROM {self.schema}.jobs GROUP BY state")
        counts = {}
        for line in rows.splitlines():
            state, n = line.split("|")
            counts[state] = int(n)
        return counts

    def wait_for(self, predicate, timeout=60):
        deadline = time.monotonic() + timeout
        counts = {}
        while time.monotonic() < deadline:
            counts = self.counts()
            if predicate(counts):
                return counts
            time.sleep(0.05)
        raise AssertionError(f"not reached within {timeout} s; counts {counts}\n"
                             f"server log:\n{self.log.read_text()}")


@pytest.fixture
def schema():
    name = "pytest_" + uuid.uuid4().hex[:16]
    yield name
    try:
        psql(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    except subprocess.CalledProcessError:
        pass


@pytest.fixture
def server(schema, tmp_path):
    srv = Server(schema, tmp_path).start()
    yield srv
    srv.kill(signal.SIGTERM)


def wait(condition, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not met within {timeout} s")


def counting_nap():
    """A handler that naps 5 ms and counts its runs by job id; returns (handler, runs)."""
    runs = collections.Counter()
    lock = threading.Lock()

    def nap(job):
        time.sleep(0.005)
        with lock:
            runs[job.id] += 1

    return nap, runs


SERVER_KEY = re.compile(r"peers need the server key (\S{40})")

ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


#: The trigger that fails a schema's log stores (shared with the Rust and Node tests).
FAIL_LOG_STORES = ROOT / "crates" / "hopper-postgres" / "src" / "testing" / "fail_log_stores.sql"


@contextlib.contextmanager
def table_locked(table):
    """Holds a SHARE lock on ``table`` while the block runs: writes to it wait meanwhile."""
    proc = subprocess.Popen(["psql", DATABASE_URL, "-XtAq", "-v", "ON_ERROR_STOP=1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(f"BEGIN; LOCK TABLE {table} IN SHARE MODE; SELECT 'locked';\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "locked", "the lock is taken"
        yield
        proc.stdin.write("COMMIT;\n")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def fail_log_stores(schema, failures, sqlstate):
    """Has the first ``failures`` statements that store job log lines in ``schema`` fail
    with SQLSTATE ``sqlstate`` (None: all of them)."""
    failures = "9223372036854775807" if failures is None else int(failures)
    psql(f"SET search_path TO {schema}; {FAIL_LOG_STORES.read_text()};"
         f" INSERT INTO log_store_faults VALUES ({failures}, '{sqlstate}')")


def log_store_attempts(schema):
    """The statements that tried to store log lines since :func:`fail_log_stores`."""
    return int(psql(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END"
                    f" FROM {schema}.log_store_attempts"))
