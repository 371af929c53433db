/** Job metadata and per-job logs through the real server: submitted meta reaches the job
 * object, and what a handler logs is stored with the attempt (a flood truncated, never
 * failing the job). */

import assert from "node:assert/strict";
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
