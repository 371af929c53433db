/** Job metadata and per-job logs through the real server: submitted meta reaches the job
 * object, and what a handler logs is stored with the attempt (a flood truncated, never
 * failing the job). */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, test } from "node:test";

import { Client, HopperError, Worker } from "../src/index.js";
import { Server, psql, waitUntil } from "./server.js";

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

let server: Server;
let worker: { worker: Worker; done: Promise<void> } | undefined;

beforeEach(async () => {
  server = await Server.start();
});
afterEach(async () => {
  if (worker !== undefined) {
    worker.worker.stop();
    await worker.done;
    worker = undefined;
  }
  await server.stop();
});

interface AttemptLog {
  attempt: number;
  dropped: number;
  lines: { level: string; message: string; fields?: Record<string, unknown> }[];
}

function logsOf(id: string): AttemptLog[] {
  return JSON.parse(
    psql(
      `SELECT coalesce(json_agg(json_build_object('attempt', attempt, 'lines', lines, 'dropped', dropped)` +
        ` ORDER BY attempt), '[]') FROM ${server.schema}.job_logs WHERE job_id = '${id}'`,
    ),
  ) as AttemptLog[];
}

test("meta reaches the worker and logs are stored, a flood truncated", async () => {
  const seen = new Map<number, Record<string, unknown>>();
  const client = await Client.connect(server.endpoint, { token: server.token });
  let quiet: string;
  let noisy: string;
  try {
    quiet = await client.submit("chatty", { n: 1, flood: 0 }, { meta: { tenant: "acme", traceparent: TRACEPARENT } });
    noisy = await client.submit("chatty", { n: 2, flood: 2_000 });
    await assert.rejects(
      client.submit("chatty", { n: 3, flood: 0 }, { meta: { traceparent: "00-nope" } }),
      (e: unknown) => e instanceof HopperError && e.message.includes("traceparent"),
    );
  } finally {
    client.close();
  }
  const w = new Worker(server.endpoint, { token: server.token, concurrency: 2, stopOnSignals: false });
  w.handle("chatty", (job) => {
    const args = job.args as { n: number; flood: number };
    seen.set(args.n, job.meta);
    job.log("info", "started", { rows: args.n });
    for (let i = 0; i < args.flood; i++) job.log("debug", `row ${i} ${"x".repeat(100)}`);
    job.log("warn", "done");
  });
  worker = { worker: w, done: w.run() };
  await server.waitFor((c) => c["completed"] === 2, 60_000);
  await waitUntil(() => logsOf(quiet).length === 1, "the quiet job's log");
  await waitUntil(() => {
    const logs = logsOf(noisy);
    return logs.length === 1 && logs[0]!.lines.length + logs[0]!.dropped === 2_002;
  }, "the noisy job's log");

  assert.deepEqual(seen.get(1), { tenant: "acme", traceparent: TRACEPARENT });
  assert.deepEqual(seen.get(2), {});
  const lines = logsOf(quiet)[0]!.lines;
  assert.deepEqual(lines.map((l) => l.message), ["started", "done"]);
  assert.deepEqual(lines[0]!.fields, { rows: 1 });
  assert.equal(lines[1]!.level, "warn");
  const flood = logsOf(noisy)[0]!;
  assert.ok(flood.dropped > 0, "a flood is truncated");
  assert.equal(flood.lines[0]!.message, "started");
});

test("a worker killed mid-attempt keeps the lines it logged; the next attempt has its own", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("chatter", { lines: 3 });
    const script = fileURLToPath(new URL("./worker_proc.js", import.meta.url));
    const doomed = spawn(process.execPath, [script, server.endpoint, server.token, "3600000"], { stdio: "inherit" });
    const exited = new Promise((done) => doomed.once("exit", done));
    try {
      // Sent while the handler still runs: a second after the first line.
      await waitUntil(() => logsOf(id)[0]?.lines.length === 3, "the running attempt's lines");
    } finally {
      doomed.kill("SIGKILL");
      await exited;
    }
    const w = new Worker(server.endpoint, { token: server.token, stopOnSignals: false });
    w.handle("chatter", (job) => job.log("info", "finished"));
    worker = { worker: w, done: w.run() };
    await server.waitFor((c) => c["completed"] === 1, 60_000);

    const logs = await client.jobLogs(id);
    assert.deepEqual(logs.map((l) => l.attempt), [1, 2]);
    assert.deepEqual(logs[0]!.lines.map((l) => l.message), ["line 0", "line 1", "line 2"]);
    assert.deepEqual(logs[0]!.lines[0]!.fields, { attempt: 1 });
    assert.equal(logs[0]!.dropped, 0);
    assert.deepEqual(logs[1]!.lines.map((l) => l.message), ["finished"], "its own attempt");
  } finally {
    client.close();
  }
});

test("jobLogs reads every page and refuses a missing job", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("paged", {});
    assert.deepEqual(await client.jobLogs(id), []);
    // Eleven attempts' logs, more than one page (8) of the server's.
    psql(
      `UPDATE ${server.schema}.jobs SET attempt = 11 WHERE id = '${id}';` +
        ` INSERT INTO ${server.schema}.job_logs (job_id, attempt, lines, bytes, dropped)` +
        ` SELECT '${id}', g, jsonb_build_array(jsonb_build_object(` +
        `'at', '2026-11-26T12:00:00Z', 'level', 'info', 'message', 'try ' || g)),` +
        ` 60, g FROM generate_series(1, 11) AS g`,
    );
    const logs = await client.jobLogs(id);
    assert.deepEqual(logs.map((l) => l.attempt), Array.from({ length: 11 }, (_, i) => i + 1));
    assert.deepEqual(logs.map((l) => l.dropped), Array.from({ length: 11 }, (_, i) => i + 1));
    assert.deepEqual(logs[10]!.lines, [{ at: "2026-11-26T12:00:00Z", level: "info", message: "try 11" }]);
    await assert.rejects(
      client.jobLogs("0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e"),
      (e: unknown) => e instanceof HopperError && e.code === "not_found",
    );
  } finally {
    client.close();
  }
});
