/** What a worker is given that it must refuse, drop or make sendable (as the Python worker
 * does, but for text UTF-8 cannot encode, which Python drops): options of the wrong type
 * (one string for its queues), lone surrogates in a log line or an error, a log request or
 * an outcome that cannot be encoded. None may kill the worker, lose other lines, or leave a
 * job held or its log sent again for seconds. */

import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { Client, type Job, type LogLine, Worker, type WorkerOptions } from "../src/index.js";
import { Server, sleep, waitUntil } from "./server.js";

let server: Server;
beforeEach(async () => {
  server = await Server.start();
});
afterEach(async () => {
  await server.stop();
});

/** A worker on the test server, its warnings kept; `stop()` stops it and says how long
 * that took. */
function startWorker(handlers: Record<string, (job: Job) => unknown>): {
  worker: Worker;
  warnings: string[];
  stop: () => Promise<number>;
} {
  const warnings: string[] = [];
  const worker = new Worker(server.endpoint, { token: server.token, stopOnSignals: false, logger: { warn: (t) => warnings.push(t) } });
  for (const [kind, handler] of Object.entries(handlers)) worker.handle(kind, handler);
  const done = worker.run();
  return {
    worker,
    warnings,
    stop: async () => {
      const started = Date.now();
      worker.stop();
      await done;
      return Date.now() - started;
    },
  };
}

/** The first attempt's log lines of job `id`, once `count` of them are stored (or 20 s
 * passed). */
async function linesOf(client: Client, id: string, count: number): Promise<LogLine[]> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const lines = (await client.jobLogs(id))[0]?.lines ?? [];
    if (lines.length >= count || Date.now() > deadline) return lines;
    await sleep(20);
  }
}

test("worker options of the wrong type are refused when the worker is made", () => {
  const make = (options: Record<string, unknown>): Worker => new Worker("tcp://127.0.0.1:1", { token: "t", ...options } as WorkerOptions);
  // One string was sent as is, and the hello refused by the server when the worker ran.
  assert.throws(() => make({ queues: "mail" }), { name: "TypeError", message: 'queues must be an array of queue names, not a string: ["mail"]' });
  assert.throws(() => make({ queues: new Set(["mail"]) }), { name: "TypeError", message: "queues must be an array of queue names, not a Set" });
  assert.throws(() => make({ queues: ["mail", 7] }), { name: "TypeError", message: "queues[1] must be a string, not a number" });
  assert.throws(() => make({ concurrency: "4" }), { name: "TypeError", message: "concurrency must be an integer, not a string" });
  assert.throws(() => make({ concurrency: 10_001 }), { name: "RangeError", message: /^concurrency must be an integer from 0 to 10,000/ });
  assert.throws(() => make({ prefetch: -1 }), { name: "RangeError", message: /^prefetch must be an integer from 0 to 10,000/ });
  assert.throws(() => make({ ackTimeoutMs: NaN }), { name: "RangeError", message: /^ackTimeoutMs must be a finite number of milliseconds/ });
  assert.throws(() => make({ shutdownTimeoutMs: "30s" }), { name: "TypeError", message: /^shutdownTimeoutMs must be a number of milliseconds, not a string/ });
  assert.throws(() => make({ name: 5 }), { name: "TypeError", message: "name must be a string, not a number" });
  const worker = make({ queues: ["mail"], concurrency: 0 });
  assert.throws(() => worker.handle(5 as unknown as string, () => {}), { name: "TypeError", message: "kind must be a string, not a number" });
  assert.throws(() => worker.handle("k", "run" as unknown as () => void), { name: "TypeError", message: 'the handler of "k" must be a function, not a string' });
});

test("lone surrogates in a log line or an error are sent as U+FFFD; the job and its other lines go on", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  const { stop } = startWorker({
    logs: (job: Job) => {
      job.log("info", "before");
      job.log("info", "half \uD800 a pair", { ["k\uDC00"]: "v\uDBFF", nested: ["\uDC00"] });
      job.log("info", `${"m".repeat(4095)}\uD83D\uDE00`); // the cut at 4,096 parts the pair
      job.log("info", "after");
    },
    fails: () => {
      throw new Error("half \uDC00 a pair");
    },
  });
  try {
    const logs = await client.submit("logs", {});
    const fails = await client.submit("fails", {}, { maxAttempts: 1 });
    // Without the fix, the failure's outcome is refused as not CBOR and the job stays held.
    await server.waitFor((c) => c["completed"] === 1 && c["failed"] === 1, 20_000);
    assert.equal((await client.status(fails)).errors[0]?.error, "Error: half \uFFFD a pair");
    const lines = await linesOf(client, logs, 4);
    assert.deepEqual(
      lines.map((l) => (l.message.startsWith("mmm") ? "m…" : l.message)),
      ["before", "half \uFFFD a pair", "m…", "after"],
    );
    // (The server cuts that one at 4 KiB of UTF-8 on its side.)
    assert.ok(!/[\uD800-\uDFFF]/.test(lines[2]?.message ?? ""), "no half of the pair");
    assert.deepEqual(lines[1]?.fields, { ["k\uFFFD"]: "v\uFFFD", nested: ["\uFFFD"] });
  } finally {
    client.close();
    await stop();
  }
});

test("a log request that cannot be encoded is given up at once; the job and the worker go on", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  const { warnings, stop } = startWorker({
    odd: (job: Job) => {
      job.log("info", "lost with the odd line: one request");
      // A line that slipped past Job.log's checks (none can through it): cbor-x has no form
      // for a function.
      (job as unknown as { logLines: unknown[] }).logLines.push({ level: "info", message: "odd", at: new Date().toISOString(), fn: () => 1 });
    },
    plain: (job: Job) => {
      job.log("info", "plain");
    },
  });
  let stopMs = Infinity;
  try {
    const odd = await client.submit("odd", {});
    await server.waitFor((c) => c["completed"] === 1, 20_000);
    // Given up at once, not sent again for 5 s.
    await waitUntil(() => warnings.some((w) => /2 log lines of job .* are lost: Unencodable: invalid: cannot encode log/.test(w)), "the lines given up", 1_500);
    const plain = await client.submit("plain", {});
    await server.waitFor((c) => c["completed"] === 2, 20_000);
    assert.deepEqual((await linesOf(client, plain, 1)).map((l) => l.message), ["plain"]);
    assert.deepEqual(await client.jobLogs(odd), []);
  } finally {
    client.close();
    stopMs = await stop();
  }
  assert.ok(stopMs < 2_000, `the worker took ${stopMs} ms to stop`);
});

test("an outcome that cannot be encoded is dropped, not kept to be sent again", async () => {
  const { worker, warnings, stop } = startWorker({});
  const internals = worker as unknown as { sendOutcome: (m: Record<string, unknown>) => void; unacked: Map<number, unknown> };
  try {
    await waitUntil(() => (worker as unknown as { conn: unknown }).conn !== null, "the connection");
    internals.sendOutcome({ type: "completed", id: "0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e", attempt: 1, odd: Symbol("odd") });
    await waitUntil(() => internals.unacked.size === 0, "the outcome dropped", 1_000);
    assert.ok(warnings.some((w) => /dropped a completed message that cannot be sent: Unencodable: invalid: cannot encode completed/.test(w)), warnings.join("\n"));
  } finally {
    assert.ok((await stop()) < 2_000);
  }
});
