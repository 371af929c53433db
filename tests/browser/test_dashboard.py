"""The dashboard in a real browser: headless Chromium drives `hopper serve --http`.

On a freshly seeded schema it signs in with the generated admin token, checks the counts
of the seeded database, retries a failed job by clicking, runs a worker
(`hopper bench --workload drain`) and sees the job complete. Markup stored in every field
the dashboard shows, and put in the URL's hash, is shown as text and never runs.
Screenshots are saved under $HOPPER_ARTIFACTS (default target/browser-artifacts).

Needs: Debian `chromium` and `chromium-driver`, `pip install selenium pytest`,
PostgreSQL at $DATABASE_URL, and the binary at $HOPPER_BIN (default target/debug/hopper).
Run: python3 -m pytest -q tests/browser
"""

import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse
import uuid
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
HOPPER = os.environ.get("HOPPER_BIN", str(ROOT / "target" / "debug" / "hopper"))
DATABASE_URL = os.environ.get(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
)
ARTIFACTS = Path(os.environ.get("HOPPER_ARTIFACTS", ROOT / "target" / "browser-artifacts"))
WAIT = 30  # seconds: an upper bound, never a sleep; every wait ends on a condition

# What the seed writes; the dashboard must show exactly these totals.
SEEDED = {
    "scheduled": 2,
    "available": 3,
    "running": 0,
    "completed": 7,
    "failed": 2,
    "cancelled": 1,
}


def seed_sql(schema: str) -> str:
    """Jobs in every state but running, written directly (a documented table)."""
    return f"""
    INSERT INTO {schema}.jobs (id, queue, kind, args, state, attempt, run_at, attempted_at, finished_at, duration_ms)
    SELECT {schema}.uuid_v7(), 'bench', 'bench', jsonb_build_object('n', i), 'completed', 1,
           now() - make_interval(secs => 60 * i + 0.02 * i), now() - make_interval(secs => 60 * i),
           now() - make_interval(secs => 60 * i - 0.04 * i), 40 * i
    FROM generate_series(1, 7) AS i;
    INSERT INTO {schema}.jobs (id, queue, kind, args, state, attempt, max_attempts, run_at, attempted_at, finished_at, errors, meta)
    SELECT {schema}.uuid_v7(), 'bench', 'bench', jsonb_build_object('n', 100 + i), 'failed', 3, 3,
           now() - interval '90 s', now() - interval '89.97 s', now() - interval '89.95 s',
           jsonb_build_array(jsonb_build_object('attempt', 3, 'at', now(), 'error',
                             'smtp timeout (seeded)', 'node', NULL, 'duration_ms', 12)),
           jsonb_build_object('tenant', 'acme-seeded')
    FROM generate_series(1, 2) AS i;
    INSERT INTO {schema}.job_logs (job_id, attempt, lines, bytes, dropped)
    SELECT id, 3, jsonb_build_array(jsonb_build_object('at', now(), 'level', 'warn',
                  'message', 'retrying smtp (seeded log)', 'fields', jsonb_build_object('try', 3))),
           100, 5
    FROM {schema}.jobs WHERE state = 'failed';
    INSERT INTO {schema}.jobs (id, queue, kind, state, finished_at)
    VALUES ({schema}.uuid_v7(), 'mail', 'send_email', 'cancelled', now());
    INSERT INTO {schema}.jobs (id, queue, kind, state, run_at)
    SELECT {schema}.uuid_v7(), 'mail', 'send_email', 'scheduled', now() + interval '1 day'
    FROM generate_series(1, 2);
    INSERT INTO {schema}.jobs (id, queue, kind, args)
    SELECT {schema}.uuid_v7(), 'mail', 'send_email', jsonb_build_object('to', 'user' || i || '@example.com')
    FROM generate_series(1, 3) AS i;
    INSERT INTO {schema}.nodes (id, name, queues, concurrency)
    VALUES ({schema}.uuid_v7(), 'seeded-node', '{{mail,bench}}', 8);
    """


def hopper(schema, *args, **kw):
    return subprocess.run(
        [HOPPER, "--schema", schema, *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": DATABASE_URL},
        timeout=120,
        **kw,
    )


def psql(sql: str):
    subprocess.run(
        ["psql", DATABASE_URL, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def server():
    """A seeded schema and `hopper serve --http 127.0.0.1:0` over it (HTTP only)."""
    schema = "browser_" + uuid.uuid4().hex[:12]
    home = tempfile.mkdtemp(prefix="hopper-browser-")
    hopper(schema, "migrate")
    psql(seed_sql(schema))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HOPPER_HTTP") and k != "HOPPER_LISTEN"
    }
    env.update(DATABASE_URL=DATABASE_URL, XDG_CONFIG_HOME=home)
    proc = subprocess.Popen(
        [HOPPER, "--schema", schema, "serve", "--http", "127.0.0.1:0"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        for line in proc.stderr:  # ends on the line that names the bound address
            m = re.search(r"dashboard on (http://127\.0\.0\.1:\d+/)", line)
            if m:
                url = m.group(1)
                break
        assert url, "hopper serve did not start"
        token_file = Path(home) / "hopper" / "http.token"
        assert token_file.stat().st_mode & 0o777 == 0o600, "the token file is 0600"
        token = [l for l in token_file.read_text().splitlines() if l and not l.startswith("#")][0]
        yield {"schema": schema, "url": url, "token": token}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        psql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def browser():
    profile = tempfile.mkdtemp(prefix="hopper-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# The page redraws itself every 2 s (it polls the API), so an element found a moment ago
# may be gone: every wait retries on a stale or missing element.
RETRY_ON = (
    StaleElementReferenceException,
    NoSuchElementException,
    ElementClickInterceptedException,
)


def until(driver, condition, message=""):
    return WebDriverWait(driver, WAIT, ignored_exceptions=RETRY_ON).until(condition, message)


def text_of(driver, css):
    return driver.find_element(By.CSS_SELECTOR, css).text


def text_is(driver, element_id, expected):
    until(
        driver,
        lambda d: expected in d.find_element(By.ID, element_id).text,
        f"#{element_id} shows {expected}",
    )


def click(driver, css):
    """Clicks the element once it is there and clickable (found again if redrawn)."""

    def attempt(d):
        element = d.find_element(By.CSS_SELECTOR, css)
        if not (element.is_displayed() and element.is_enabled()):
            return False
        element.click()
        return True

    until(driver, attempt, f"click {css}")


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / name))


def sign_in(d, server):
    d.get(server["url"])
    until(d, lambda d: d.find_element(By.ID, "login-token").is_displayed(), "sign-in form")
    d.find_element(By.ID, "login-token").send_keys(server["token"])
    click(d, "#login-submit")


def test_dashboard_shows_counts_and_retries_a_failed_job(server, browser):
    d = browser
    sign_in(d, server)

    # The overview shows the seeded counts.
    for state, n in SEEDED.items():
        text_is(d, f"total-{state}", str(n))
    until(d, lambda d: d.find_element(By.CSS_SELECTOR, '#queues-body tr[data-queue="mail"]'))
    # And the registered node, with the queues it serves.
    node = '#nodes-body tr[data-node="seeded-node"]'
    until(d, lambda d: "mail, bench" in d.find_element(By.CSS_SELECTOR, node).text, "the node")
    screenshot(d, "dashboard-overview.png")

    # The list finds jobs by metadata and shows it.
    d.get(server["url"] + "#/jobs?meta=" + urllib.parse.quote('{"tenant":"acme-seeded"}'))
    until(
        d,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#jobs-body tr")) == 2
        and len(d.find_elements(By.CSS_SELECTOR, '#jobs-body tr[data-state="failed"]')) == 2,
        "the meta filter lists the two seeded failed jobs",
    )
    text_is(d, "jobs-body", "acme-seeded")

    # Open a failed job from the list and retry it.
    d.get(server["url"] + "#/jobs?state=failed")
    click(d, '#jobs-body tr[data-state="failed"] a')
    text_is(d, "job-errors-body", "smtp timeout (seeded)")
    # Its metadata and its attempt's log, with the truncation marker.
    text_is(d, "job-meta", "acme-seeded")
    text_is(d, "job-logs-body", "retrying smtp (seeded log)")
    text_is(d, "job-logs-body", "5 more lines dropped")
    screenshot(d, "dashboard-job-meta-and-logs.png")
    click(d, "#job-retry")
    until(d, lambda d: text_of(d, '[data-field="state"]') == "available", "job retried")

    # A worker drains the bench queue (the retried job): the page then shows it completed.
    hopper(server["schema"], "bench", "--workload", "drain", "--concurrency", "2")
    until(d, lambda d: text_of(d, '[data-field="state"]') == "completed", "job completed")
    screenshot(d, "dashboard-job-completed.png")

    d.get(server["url"] + "#/")
    text_is(d, "total-completed", str(SEEDED["completed"] + 1))
    text_is(d, "total-failed", str(SEEDED["failed"] - 1))
    screenshot(d, "dashboard-after-retry.png")


def test_more_nodes_than_a_page_are_paged_through(server, browser):
    """Past a page of nodes (the API's 50), the overview shows one page at a time, by name,
    with buttons to the next page and back to the first."""
    schema = server["schema"]
    psql(
        f"INSERT INTO {schema}.nodes (id, name, queues, concurrency) "
        f"SELECT {schema}.uuid_v7(), 'node-' || lpad(i::text, 2, '0'), '{{mail}}', 1 "
        "FROM generate_series(0, 53) AS i"
    )
    d = browser
    sign_in(d, server)
    rows = "#nodes-body tr"

    def page(n, first):
        found = d.find_elements(By.CSS_SELECTOR, rows)
        return len(found) == n and found[0].get_attribute("data-node") == first

    # node-00 … node-49; then node-50 … node-53 and seeded-node.
    until(d, lambda d: page(50, "node-00"), "the first page of nodes")
    text_is(d, "nodes-page", "page 1")
    click(d, "#nodes-next")
    until(d, lambda d: page(5, "node-50"), "the second page of nodes")
    text_is(d, "nodes-page", "page 2")
    until(d, lambda d: d.find_elements(By.CSS_SELECTOR, '#nodes-body tr[data-node="seeded-node"]'))
    assert not d.find_element(By.ID, "nodes-next").is_enabled(), "the last page"
    click(d, "#nodes-first")
    until(d, lambda d: page(50, "node-00"), "the first page again")


# Markup that runs script wherever text is taken for HTML: each counts in window.__xss.
HOSTILE = [
    '<img src=x onerror="window.__xss=(window.__xss||0)+1">',
    '"><svg onload="window.__xss=(window.__xss||0)+1">',
    "</pre><script>window.__xss=(window.__xss||0)+1</script>",
]


def test_stored_text_is_shown_as_text_never_run(server, browser):
    """Whatever others stored (arguments, metadata, a unique key, an error, a log line and
    its fields, a node's name) and whatever a link carries in the URL's hash is shown as
    text: no element is made of it and no script of it runs."""
    schema = server["schema"]
    h = ["$h$" + s + "$h$" for s in HOSTILE]
    psql(
        f"""
        INSERT INTO {schema}.jobs (id, queue, kind, args, state, attempt, max_attempts,
                                   finished_at, errors, meta, unique_key)
        VALUES ({schema}.uuid_v7(), 'hostile', 'hostile', jsonb_build_object('a', {h[0]}, {h[1]}, {h[2]}),
                'failed', 1, 1, now(),
                jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(), 'error', {h[0]} || {h[2]},
                                                     'node', NULL, 'duration_ms', 3)),
                jsonb_build_object('t', {h[1]}), {h[2]});
        INSERT INTO {schema}.job_logs (job_id, attempt, lines, bytes, dropped)
        SELECT id, 1, jsonb_build_array(jsonb_build_object('at', now(), 'level', 'warn',
                      'message', {h[1]} || {h[2]}, 'fields', jsonb_build_object({h[0]}, {h[1]}))),
               100, 0
        FROM {schema}.jobs WHERE queue = 'hostile';
        INSERT INTO {schema}.nodes (id, name, queues, concurrency)
        VALUES ({schema}.uuid_v7(), {h[0]} || {h[1]}, '{{hostile}}', 1);
        """
    )
    d = browser
    sign_in(d, server)
    injected = "img[src=x], svg[onload], #app script"

    def clean(d):
        return d.execute_script("return window.__xss || 0") == 0 and not d.find_elements(
            By.CSS_SELECTOR, injected
        )

    until(d, lambda d: HOSTILE[0] in d.find_element(By.ID, "nodes-body").text, "the node")
    assert clean(d), "the overview ran stored markup"
    d.get(server["url"] + "#/jobs?queue=hostile")
    click(d, '#jobs-body tr[data-state="failed"] a')
    text_is(d, "job-errors-body", HOSTILE[2])
    text_is(d, "job-logs-body", HOSTILE[1])
    text_is(d, "job-args", "onerror")
    text_is(d, "job-meta", "onload")
    assert HOSTILE[2] in text_of(d, '[data-field="unique key"]')
    assert clean(d), "the job's page ran stored markup"
    for hash_ in ("#/jobs/" + HOSTILE[0], "#/jobs?kind=" + urllib.parse.quote(HOSTILE[1])):
        d.get(server["url"] + hash_)
        until(d, lambda d: d.find_element(By.ID, "live-status").text != "", "the page")
        assert clean(d), f"{hash_} ran markup"
