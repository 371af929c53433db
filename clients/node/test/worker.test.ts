/** Workers through the real server: outcomes, order, cancellation, faults, graceful stop. */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, test } from "node:test";

import { Client, type Handler, Permanent, Snooze, Worker, type WorkerOptions } from "../src/index.js";
import { Server, psql, sleep, waitUntil } from "./server.js";

let server: Server;
let workers: { worker: Worker; done: Promise<void> }[] = [];

beforeEach(async () => {
  server = await Server.start();
  workers = [];
});
afterEach(async () => {
  for (const { worker } of workers) worker.stop();
  await Promise.all(workers.map((w) => w.done));
  await server.stop();
});

function startWorker(handlers: Record<string, Handler>, options: WorkerOptions = {}): Worker {
  const worker = new Worker(server.endpoint, { token: server.token, concurrency: 8, stopOnSignals: false, ...options });
  for (const [kind, handler] of Object.entries(handlers)) worker.handle(kind, handler);
  workers.push({ worker, done: worker.run() });
  return worker;
}

async function stopAll(): Promise<void> {
  for (const { worker } of workers) worker.stop();
  await Promise.all(workers.map((w) => w.done));
}

async function submitBatch(kind: string, n: number): Promise<string[]> {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    return await client.submitBatch(Array.from({ length: n }, (_, i) => ({ kind, args: { n: i } })));
  } finally {
    client.close();
  }
}

test("workers drain every job exactly once", async () => {
  const runs = new Map<string, number>();
  const ids = await submitBatch("count", 2_000);
  for (let i = 0; i < 4; i++) {
    startWorker({ count: (job) => void runs.set(job.id, (runs.get(job.id) ?? 0) + 1) }, { name: `node${i}` });
  }
  await server.waitFor((c) => c["completed"] === 2_000, 120_000);
  await stopAll();
  assert.deepEqual([...runs.keys()].sort(), [...ids].sort());
  assert.ok([...runs.values()].every((n) => n === 1));
});

test("a batch runs in the order it was submitted", async () => {
  const ran: number[] = [];
  await submitBatch("fifo", 200);
  startWorker({ fifo: (job) => void ran.push((job.args as { n: number }).n) }, { concurrency: 1 });
  await server.waitFor((c) => c["completed"] === 200);
  assert.deepEqual(ran, Array.from({ length: 200 }, (_, n) => n));
});

test("outcomes: retry, snooze and permanent", async () => {
  const seen = new Map<string, number>();
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const ids: Record<string, string> = {};
    for (const mode of ["permanent", "snooze", "retry"]) {
      ids[mode] = await client.submit("flaky", { mode }, { maxAttempts: 3 });
    }
    startWorker({
      flaky: async (job) => {
        const tries = (seen.get(job.id) ?? 0) + 1;
        seen.set(job.id, tries);
        const { mode } = job.args as { mode: string };
        if (mode === "permanent") throw new Permanent("bad input");
        if (mode === "snooze" && tries === 1) throw new Snooze(0.05);
        if (mode === "retry" && tries === 1) throw new RangeError("first try fails");
      },
    });
    await server.waitFor((c) => c["completed"] === 2 && c["failed"] === 1);
    const failed = await client.status(ids["permanent"] ?? "");
    assert.equal(failed.state, "failed");
    assert.match(failed.errors[0]?.error ?? "", /bad input/);
    const retried = await client.status(ids["retry"] ?? "");
    assert.equal(retried.state, "completed");
    assert.match(retried.errors[0]?.error ?? "", /RangeError: first try fails/);
    const snoozed = await client.status(ids["snooze"] ?? "");
    assert.equal(snoozed.attempts_used, 1);
    assert.equal(snoozed.errors.length, 0);
    const minutes = await client.jobStats(5);
    assert.equal(minutes.reduce((n, m) => n + (m["completed"] as number), 0), 2);
    assert.equal(minutes.reduce((n, m) => n + (m["failed"] as number), 0), 1);
  } finally {
    client.close();
  }
});

test("heartbeats keep a job longer than the lease", async () => {
  // A lease of 3 s: without heartbeats the job would be taken back. A heartbeat of 1 s, so a
  // loaded machine's stall of a second does not drop the worker as silent.
  await server.stop();
  server = await Server.start({ timing: { heartbeat: "1s", lease: "3s" } });
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("long", {});
    startWorker({ long: () => sleep(5_000) });
    await server.waitFor((c) => c["completed"] === 1, 30_000);
    const job = await client.status(id);
    assert.equal(job.attempt, 1);
    assert.equal(job.attempts_used, 1);
  } finally {
    client.close();
  }
});

test("a cancelled job is aborted and not reported", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("wait", {});
    let started = false;
    let aborted = false;
    startWorker({
      wait: async (job) => {
        started = true;
        await new Promise<void>((done) => job.signal.addEventListener("abort", () => done()));
        aborted = true;
      },
    });
    await waitUntil(() => started, "the job started");
    assert.equal((await client.cancel(id)).state, "cancelled");
    await waitUntil(() => aborted, "the handler saw the abort");
    await stopAll();
    assert.equal((await client.status(id)).state, "cancelled");
  } finally {
    client.close();
  }
});

test("the server enforces timeouts on workers that do not", async () => {
  let cancelled = false;
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("hang", {}, { timeoutMs: 300 });
    startWorker({
      hang: async (job) => {
        if (job.countedAttempt !== 1) return;
        // This handler ignores its own timeout: the server cancels and retries the job.
        await new Promise<void>((done) => {
          job.signal.addEventListener("abort", () => done());
          setTimeout(done, 20_000);
        });
        cancelled = job.signal.aborted;
      },
    });
    await server.waitFor((c) => c["completed"] === 1);
    const job = await client.status(id);
    assert.ok(cancelled);
    assert.equal(job.attempts_used, 2);
    assert.match(job.errors[0]?.error ?? "", /timed out/);
  } finally {
    client.close();
  }
});

test("prefetched orders are held and handed back unstarted", async () => {
  let go: () => void = () => {};
  const gate = new Promise<void>((done) => (go = done));
  const started: string[] = [];
  await submitBatch("slow", 10);
  const worker = startWorker(
    {
      slow: async (job) => {
        started.push(job.id);
        await gate;
      },
    },
    { concurrency: 1, prefetch: 5 },
  );
  // One running, two held: 1 + twice the concurrency. The counts say the server claimed
  // them, which it does before it sends their orders: a worker stopped before the first one
  // arrived would hand them all back. So the first one started, too.
  await server.waitFor((c) => c["running"] === 3 && c["available"] === 7 && started.length === 1);
  worker.stop();
  // The held orders go back at once (any still on the wire as they arrive), while the
  // started one still runs.
  await server.waitFor((c) => c["running"] === 1 && c["available"] === 9);
  go();
  await stopAll();
  const counts = await server.waitFor((c) => c["completed"] === 1);
  assert.equal(counts["available"], 9);
  assert.equal(started.length, 1);
  assert.equal(psql(`SELECT count(*) FROM ${server.schema}.jobs WHERE state = 'available' AND attempt - uncounted > 0`), "0");
});

test("a worker stopped before it connected says bye: its orders use no attempt", async () => {
  // Its own server, to read when the session ends ("left after bye" is logged at info).
  const own = await Server.start({ logFilter: "warn,hopper_server::dispatch=info" });
  try {
    const client = await Client.connect(own.endpoint, { token: own.token });
    await client.submitBatch(Array.from({ length: 3 }, (_, n) => ({ kind: "k", args: { n } })));
    client.close();
    const worker = new Worker(own.endpoint, { token: own.token, name: "early", concurrency: 1, prefetch: 5, stopOnSignals: false });
    worker.handle("k", () => {});
    const done = worker.run();
    worker.stop();
    await done;
    // Without its bye, the server took the close for a vanished worker's: the orders sent
    // to its session (claimed at its hello) were retried with their attempts counted.
    const ended = (): string | undefined => readFileSync(own.log, "utf8").split("\n").find((l) => / name=early /.test(l) && /left after bye|connection closed|went silent/.test(l));
    await waitUntil(() => ended() !== undefined, "the end of the worker's session");
    assert.match(ended() ?? "", /peer left after bye/);
    await own.waitFor((c) => c["available"] === 3);
    assert.equal(psql(`SELECT count(*) FROM ${own.schema}.jobs WHERE attempt - uncounted > 0`), "0");
  } finally {
    await own.stop();
  }
});

test("an idle worker's stop waits for its bye to be acknowledged", async () => {
  const own = await Server.start({ logFilter: "warn,hopper_server::server=info,hopper_server::dispatch=info" });
  try {
    const worker = new Worker(own.endpoint, { token: own.token, name: "idle", stopOnSignals: false });
    const done = worker.run();
    const log = (): string[] => readFileSync(own.log, "utf8").split("\n").filter((l) => / name=idle /.test(l));
    await waitUntil(() => log().some((l) => /peer said hello/.test(l)), "the worker's hello");
    worker.stop();
    await done;
    // Acknowledged, so read: the server knows it left on purpose. A bye closed away unread
    // makes the close look like a vanished worker's, whose orders' attempts count.
    assert.ok(log().some((l) => /peer said bye/.test(l)), log().join("\n"));
    const ended = (): string | undefined => log().find((l) => /left after bye|connection closed|went silent/.test(l));
    await waitUntil(() => ended() !== undefined, "the end of the worker's session");
    assert.match(ended() ?? "", /peer left after bye/);
  } finally {
    await own.stop();
  }
});

test("a stop waits for the bye's acknowledgement at most ackTimeoutMs", async () => {
  const own = await Server.start({ logFilter: "warn,hopper_server::server=info" });
  try {
    const warnings: string[] = [];
    const logger = { warn: (m: string) => void warnings.push(m) };
    const worker = new Worker(own.endpoint, { token: own.token, name: "orphan", ackTimeoutMs: 300, stopOnSignals: false, logger });
    const done = worker.run();
    await waitUntil(() => readFileSync(own.log, "utf8").includes("peer said hello"), "the worker's hello");
    await own.kill("SIGKILL");
    const stopped = Date.now();
    worker.stop();
    await done;
    const waited = Date.now() - stopped;
    assert.ok(waited >= 250 && waited < 5_000, `stop took ${waited} ms`);
    assert.ok(warnings.some((w) => /did not acknowledge the bye/.test(w)), warnings.join("\n"));
  } finally {
    await own.stop();
  }
});

test("a worker that reconnects while it stops says bye again: no orders come to it", async () => {
  const own = await Server.start({ logFilter: "warn,hopper_server::server=info" });
  let go: () => void = () => {};
  const gate = new Promise<void>((done) => (go = done));
  let started = false;
  const worker = new Worker(own.endpoint, { token: own.token, concurrency: 2, stopOnSignals: false });
  worker.handle("k", async () => {
    started = true;
    await gate;
  });
  const done = worker.run();
  const client = await Client.connect(own.endpoint, { token: own.token });
  try {
    await client.submit("k", {});
    await waitUntil(() => started, "the job started");
    worker.stop();
    // The new server forgets the session: the worker says hello again (with a slot free).
    await own.kill("SIGKILL");
    await own.start();
    const said = (): boolean => readFileSync(own.log, "utf8").includes("peer said bye");
    await waitUntil(() => said(), "the worker's bye to the new server");
    // So the new session gets no order: this job stays untouched while the other finishes.
    const later = await client.submit("k", {});
    go();
    await done;
    assert.equal((await client.status(later)).state, "available");
    assert.equal(psql(`SELECT attempt FROM ${own.schema}.jobs WHERE id = '${later}'`), "0");
  } finally {
    go();
    client.close();
    await own.stop();
  }
});

test("a killed worker's jobs complete elsewhere", async () => {
  await submitBatch("nap", 20);
  const script = fileURLToPath(new URL("./worker_proc.js", import.meta.url));
  const doomed = spawn(process.execPath, [script, server.endpoint, server.token, "3600000"], { stdio: "inherit" });
  const exited = new Promise((done) => doomed.once("exit", done));
  try {
    await server.waitFor((c) => c["running"] === 5);
  } finally {
    doomed.kill("SIGKILL");
    await exited;
  }
  startWorker({ nap: () => sleep(10) }, { concurrency: 5 });
  await server.waitFor((c) => c["completed"] === 20);
});

test("a server restart loses nothing", async () => {
  const runs = new Map<string, number>();
  const ids = await submitBatch("nap", 1_500);
  for (let i = 0; i < 2; i++) {
    startWorker(
      {
        nap: async (job) => {
          await sleep(5);
          runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
        },
      },
      { name: `node${i}` },
    );
  }
  await server.waitFor((c) => (c["completed"] ?? 0) >= 300);
  await server.kill("SIGKILL");
  await sleep(500);
  await server.start();
  await server.waitFor((c) => c["completed"] === 1_500, 120_000);
  await stopAll();
  assert.deepEqual([...runs.keys()].sort(), [...ids].sort());
});
