/** Job log lines through the real server while the database fails their stores: a
 * transient failure (a serialization failure, SQLSTATE 40001) is answered as such and the
 * worker sends the lines again, in order; a permanent one (a trigger's exception) is given
 * up at once; a request left without a reply is sent again. */

import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { Client, type Job, Worker } from "../src/index.js";
import { Server, failLogStores, lockTable, logStoreAttempts, psql, sleep, waitUntil } from "./server.js";

const LINES = 300;
const line = (i: number): string => `line ${i} ${"x".repeat(90)}`;

let server: Server;

beforeEach(async () => {
  server = await Server.start();
});
afterEach(async () => {
  await server.stop();
});

function messagesOf(id: string): string[] {
  return JSON.parse(
    psql(
      `SELECT coalesce(json_agg(l->>'message' ORDER BY n), '[]') FROM ${server.schema}.job_logs,` +
        ` jsonb_array_elements(lines) WITH ORDINALITY AS e(l, n) WHERE job_id = '${id}'`,
    ),
  ) as string[];
}

/** Logs `lines` numbered lines, yielding every 50 so that some are sent mid-run. */
async function numbered(job: Job): Promise<void> {
  const { lines } = job.args as { lines: number };
  for (let i = 0; i < lines; i++) {
    job.log("info", line(i));
    if (i % 50 === 49) await sleep(10);
  }
}

/** Runs one job of `lines` lines with a worker of its own until it completed and
 * `settled(id)` holds; returns its id and how long the worker then took to stop. */
async function runOne(lines: number, settled: (id: string) => boolean): Promise<{ id: string; stopMs: number }> {
  const client = await Client.connect(server.endpoint, { token: server.token });
  const id = await client.submit("numbered", { lines }).finally(() => client.close());
  const worker = new Worker(server.endpoint, { token: server.token, stopOnSignals: false });
  worker.handle("numbered", numbered);
  const done = worker.run();
  let started = Date.now();
  try {
    await server.waitFor((c) => c["completed"] === 1, 60_000);
    await waitUntil(() => settled(id), "the log stores");
    started = Date.now();
  } finally {
    worker.stop();
    await done;
  }
  return { id, stopMs: Date.now() - started };
}

test("lines the database fails for a while are sent again, in order", async () => {
  failLogStores(server.schema, 3, "40001");
  const { id } = await runOne(LINES, (id) => messagesOf(id).length >= LINES);
  assert.deepEqual(messagesOf(id), Array.from({ length: LINES }, (_, i) => line(i)), "all, in order, once");
  assert.ok(logStoreAttempts(server.schema) > 3, "the failed stores were tried again");
});

test("lines the database refuses for good are given up at once", async () => {
  failLogStores(server.schema, null, "P0001");
  const { id, stopMs } = await runOne(3, () => logStoreAttempts(server.schema) >= 1);
  // A worker that retried would still hold its log, and stop only after the bound.
  assert.ok(stopMs < 4_000, `the worker waited ${stopMs} ms on a refused log`);
  assert.equal(logStoreAttempts(server.schema), 1, "one try, no retry");
  assert.deepEqual(messagesOf(id), []);
});

test("a log request left without a reply is sent again", async () => {
  // The first store waits behind a lock on the table past the worker's reply timeout, then
  // fails (transient): its reply comes late, to a request the worker sent again meanwhile.
  failLogStores(server.schema, 1, "40001");
  const lock = await lockTable(`${server.schema}.job_logs`);
  const client = await Client.connect(server.endpoint, { token: server.token });
  const id = await client.submit("numbered", { lines: 3 }).finally(() => client.close());
  const warnings: string[] = [];
  const logger = { warn: (text: string) => warnings.push(text) };
  const worker = new Worker(server.endpoint, { token: server.token, stopOnSignals: false, ackTimeoutMs: 2_000, logger });
  worker.handle("numbered", numbered);
  const done = worker.run();
  try {
    await waitUntil(() => warnings.some((w) => w.includes("no reply")), "the log request left without a reply");
  } finally {
    await lock.release();
  }
  try {
    await server.waitFor((c) => c["completed"] === 1, 60_000);
  } finally {
    worker.stop();
    await done;
  }
  // Once: the late failure was not taken for the answer to the copy (and sent again).
  assert.deepEqual(messagesOf(id), [line(0), line(1), line(2)], "all, in order, once");
  assert.equal(logStoreAttempts(server.schema), 2, "the first store, then the copy's");
});
