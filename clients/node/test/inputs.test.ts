/** What a caller gives that the protocol cannot carry: args and meta that are not JSON,
 * log levels the server does not know, log fields that are not JSON, snoozes and extends out
 * of range, huge or unprintable errors. Submits are refused before anything is sent; nothing
 * a handler does may kill the worker, lose other log lines, or leave a job held (and
 * heartbeated) or looping. */

import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { Client, type Handler, type Job, Permanent, Snooze, Worker, jobSpec } from "../src/index.js";
import { refuses } from "./assertions.js";
import { Server, psql } from "./server.js";

const TEN_YEARS_S = 315_360_000;

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

function startWorker(handlers: Record<string, Handler>): Worker {
  const worker = new Worker(server.endpoint, { token: server.token, concurrency: 4, stopOnSignals: false });
  for (const [kind, handler] of Object.entries(handlers)) worker.handle(kind, handler);
  workers.push({ worker, done: worker.run() });
  return worker;
}

test("args and meta that are not JSON are refused before anything is sent, naming the path", async () => {
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic["self"] = cyclic;
  const deep: unknown[] = [];
  let inner = deep;
  for (let i = 0; i < 300; i++) {
    const next: unknown[] = [];
    inner.push(next);
    inner = next;
  }
  const refused: [unknown, typeof TypeError | typeof RangeError, RegExp][] = [
    [{ ratio: NaN }, RangeError, /^args\.ratio is NaN, which is not a JSON number/],
    [{ list: [1, Infinity] }, RangeError, /^args\.list\[1\] is Infinity/],
    [{ big: 2n ** 64n }, RangeError, /^args\.big: the integer 18446744073709551616 does not fit in 64 bits/],
    [{ small: -(2n ** 63n) - 1n }, RangeError, /^args\.small: .* does not fit in 64 bits/],
    [{ cc: undefined }, TypeError, /^args\.cc is undefined, which JSON cannot hold/],
    [[1, , 3], TypeError, /^args\[1\] is undefined/], // eslint-disable-line no-sparse-arrays
    [{ when: new Date() }, TypeError, /^args\.when is a Date, .*toISOString/],
    [{ "odd key": () => 1 }, TypeError, /^args\["odd key"\] is a function/],
    [{ s: Symbol("x") }, TypeError, /^args\.s is a symbol/],
    [{ m: new Map() }, TypeError, /^args\.m is a Map/],
    [{ bytes: new Uint8Array(2) }, TypeError, /^args\.bytes is a Uint8Array/],
    [{ c: cyclic }, TypeError, /^args\.c\.self holds itself/],
    [deep, RangeError, /nests deeper than 200 levels/],
  ];
  for (const [args, type, pattern] of refused) {
    await refuses(() => jobSpec({ kind: "k", args: args as Record<string, unknown> }), type, pattern);
  }
  // Within 64 bits, a bigint is an integer of the protocol; a null-prototype map is a map.
  const plain = Object.create(null) as Record<string, unknown>;
  plain["x"] = 1;
  const spec = jobSpec({ kind: "k", args: { max: 2n ** 64n - 1n, min: -(2n ** 63n), plain, n: null, f: 1.5 } });
  assert.deepEqual(spec["args"], { max: 2n ** 64n - 1n, min: -(2n ** 63n), plain: { x: 1 }, n: null, f: 1.5 });
  // The options are checked too, and a batch names the job.
  await refuses(() => jobSpec({ kind: "k", meta: { at: new Date() } }), TypeError, /^meta\.at is a Date/);
  await refuses(() => jobSpec({ kind: "k", delayMs: -1 }), RangeError, /^delayMs must be an integer from 0 to 315,360,000,000, got -1/);
  await refuses(() => jobSpec({ kind: "k", delayMs: NaN }), RangeError, /^delayMs must be an integer/);
  await refuses(() => jobSpec({ kind: "k", maxAttempts: 0 }), RangeError, /^maxAttempts must be/);
  await refuses(() => jobSpec({ kind: "k", timeoutMs: 1.5 }), RangeError, /^timeoutMs must be/);
  await refuses(() => jobSpec({ kind: "k", priority: 40_000 }), RangeError, /^priority/);
  await refuses(() => jobSpec({ kind: "k", runAt: new Date("nope") }), RangeError, /^runAt is an invalid Date/);
  assert.equal(jobSpec({ kind: "k", runAt: new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 6)) })["run_at"], "2030-01-02T03:04:05.006Z");

  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    await refuses(() => client.submit("k", { ratio: NaN }), RangeError, /^args\.ratio is NaN/);
    await refuses(() => client.submit("k", {}, { meta: { tenant: undefined } }), TypeError, /^meta\.tenant is undefined/);
    await refuses(
      () => client.submitBatch([{ kind: "k", args: {} }, { kind: "k", args: { when: new Date() } }]),
      TypeError,
      /^jobs\[1\]\.args\.when is a Date/,
    );
    // Nothing was sent: no job at all, the batch's good one included.
    assert.deepEqual(server.counts(), {});
    const id = await client.submit("k", { big: 2n ** 63n, ratio: 0.5 }, { runAt: new Date(Date.now() + 60_000) });
    const job = await client.status(id);
    assert.equal(job.state, "scheduled");
    assert.deepEqual(job.args, { big: 2n ** 63n, ratio: 0.5 });
  } finally {
    client.close();
  }
});

test("log levels are the server's in any case, plus critical and fatal; others throw", async () => {
  const thrown: unknown[] = [];
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("levels", {});
    startWorker({
      levels: (job: Job) => {
        for (const level of ["TRACE", "debug", "Info", "warn", "WARNING", "error", "critical", "FATAL"]) job.log(level, level);
        for (const level of ["loud", "", "warn ", null, 30]) {
          try {
            job.log(level as string, "never");
          } catch (e) {
            thrown.push(e);
          }
        }
        job.log("info", "after");
      },
    });
    await server.waitFor((c) => c["completed"] === 1, 30_000);
    let lines: { level: string; message: string }[] = [];
    const deadline = Date.now() + 30_000;
    while (lines.length < 9 && Date.now() < deadline) {
      lines = (await client.jobLogs(id))[0]?.lines ?? [];
    }
    assert.deepEqual(
      lines.map((l) => l.level),
      ["trace", "debug", "info", "warn", "warn", "error", "error", "error", "info"],
    );
  } finally {
    client.close();
  }
  assert.equal(thrown.length, 5);
  assert.ok(thrown.slice(0, 3).every((e) => e instanceof RangeError));
  assert.ok(thrown.slice(3).every((e) => e instanceof TypeError));
  assert.match((thrown[0] as Error).message, /^unknown log level "loud": expected trace, debug, info, warn/);
});

class Odd {
  constructor(readonly x = 1) {}
}

test("log fields that are not JSON are written as text; the worker and the other lines live", async () => {
  const cyclic: Record<string, unknown> = { name: "loop" };
  cyclic["self"] = cyclic;
  const unshowable = Object.create(null) as object; // String() of it throws
  const when = new Date(Date.UTC(2026, 10, 28, 12, 0, 0));
  const returned: unknown[] = [];
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const first = await client.submit("chatty", {});
    startWorker({
      chatty: (job: Job) => {
        job.log("info", "first", { rows: 1 });
        returned.push(
          job.log("info", "odd", {
            big: 2n ** 70n,
            nan: NaN,
            inf: -Infinity,
            undef: undefined,
            sym: Symbol("s"),
            fn: function named() {},
            when,
            cyclic,
            err: new RangeError("bad"),
            set: new Set([1, "a"]),
            map: new Map<unknown, unknown>([[1, { n: NaN }]]),
            odd: new Odd(),
            unshowable: { inner: unshowable },
            nested: [[when, 1n]],
          }),
        );
        returned.push(job.log("info", unshowable as unknown as string, JSON.parse('{"__proto__": 1}') as Record<string, unknown>));
        job.log("info", "last");
      },
    });
    await server.waitFor((c) => c["completed"] === 1, 30_000);
    // The worker lives on: it runs the next job too.
    await client.submit("chatty", {});
    await server.waitFor((c) => c["completed"] === 2, 30_000);
    let lines: { message: string; fields?: Record<string, unknown> }[] = [];
    const deadline = Date.now() + 30_000;
    while (lines.length < 4 && Date.now() < deadline) {
      lines = (await client.jobLogs(first))[0]?.lines ?? [];
    }
    assert.deepEqual(returned, [undefined, undefined, undefined, undefined], "log returns nothing, both jobs");
    assert.deepEqual(lines.map((l) => l.message).slice(0, 2), ["first", "odd"]);
    assert.match(lines[2]!.message, /^<an object that cannot be shown/);
    assert.equal(lines[3]!.message, "last");
    assert.deepEqual(lines[1]!.fields, {
      big: String(2n ** 70n),
      nan: "NaN",
      inf: "-Infinity",
      undef: "undefined",
      sym: "Symbol(s)",
      fn: "[Function: named]",
      when: "2026-11-28T12:00:00.000Z",
      cyclic: { name: "loop", self: "[Circular]" },
      err: "RangeError: bad",
      set: [1, "a"],
      map: { "1": { n: "NaN" } },
      odd: { x: 1 },
      unshowable: { inner: {} },
      nested: [["2026-11-28T12:00:00.000Z", "1"]],
    });
    // An own "__proto__" key stays a key (cbor-x's decoder renames it when reading back).
    const stored = psql(`SELECT lines->2->'fields' FROM ${server.schema}.job_logs WHERE job_id = '${first}'`);
    assert.equal(stored, '{"__proto__": 1}');
  } finally {
    client.close();
  }
});

test("a Snooze or an extend out of range is refused when made", async () => {
  for (const seconds of [Infinity, -Infinity, NaN, -5, TEN_YEARS_S + 1, 1e308]) {
    await refuses(() => new Snooze(seconds), RangeError, /^Snooze seconds must be/);
  }
  await refuses(() => new Snooze("30" as unknown as number), TypeError, /^Snooze seconds must be a number/);
  assert.equal(new Snooze(0).seconds, 0);
  assert.equal(new Snooze(TEN_YEARS_S).seconds, TEN_YEARS_S);
});

test("a Snooze carrying a bad delay, or a bad extend, fails the attempt", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const ids = new Map<string, string>();
    for (const mode of ["inf", "nan", "negative", "long", "extend"]) {
      ids.set(mode, await client.submit("snoozy", { mode }, { maxAttempts: 1 }));
    }
    startWorker({
      snoozy: (job: Job) => {
        const { mode } = job.args as { mode: string };
        if (mode === "extend") job.extend(Infinity);
        const snooze = new Snooze(1);
        const bad: Record<string, number> = { inf: Infinity, nan: NaN, negative: -5, long: TEN_YEARS_S + 1 };
        (snooze as unknown as { seconds: number }).seconds = bad[mode]!;
        throw snooze;
      },
    });
    await server.waitFor((c) => c["failed"] === 5, 30_000);
    for (const [mode, id] of ids) {
      const job = await client.status(id);
      assert.equal(job.attempts_used, 1, mode);
      const error = job.errors[0]!.error;
      if (mode === "extend") assert.match(error, /^RangeError: extend seconds must be a finite number/);
      else assert.match(error, /^invalid Snooze: Snooze seconds must be/, mode);
    }
  } finally {
    client.close();
  }
});

test("huge, unprintable and odd errors fail the attempt; the worker lives", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const ids = new Map<string, string>();
    for (const mode of ["huge", "unprintable", "getter", "permanent", "surrogate"]) {
      ids.set(mode, await client.submit("broken", { mode }, { maxAttempts: 1 }));
    }
    startWorker({
      broken: (job: Job) => {
        const { mode } = job.args as { mode: string };
        if (mode === "huge") throw new RangeError("x".repeat(3_000_000)); // over the server's frame as is
        if (mode === "unprintable") throw Object.create(null); // String() of it throws
        if (mode === "getter") {
          const e = new Error("hidden");
          Object.defineProperty(e, "message", {
            get() {
              throw new Error("no message for you");
            },
          });
          throw e;
        }
        if (mode === "permanent") throw new Permanent("p".repeat(20_000));
        throw new Error(`${"y".repeat(16 * 1024 - 8)}😀😀`); // a pair across the cut
      },
    });
    await server.waitFor((c) => c["failed"] === 5, 30_000);
    const errors = new Map<string, string>();
    for (const [mode, id] of ids) errors.set(mode, (await client.status(id)).errors[0]!.error);
    const huge = errors.get("huge")!;
    assert.ok(huge.startsWith("RangeError: xxx") && huge.endsWith("characters cut)"), huge.slice(-40));
    assert.ok(huge.length < 17_000);
    assert.match(errors.get("unprintable")!, /^<an object that cannot be shown/);
    assert.match(errors.get("getter")!, /^<an Error that cannot be shown/);
    assert.ok(errors.get("permanent")!.startsWith("ppp") && errors.get("permanent")!.length < 17_000);
    assert.ok(!/\uFFFD/.test(errors.get("surrogate")!), "no lone surrogate reached the server");
    // The worker still runs jobs.
    await client.submit("broken", { mode: "huge" }, { maxAttempts: 1 });
    await server.waitFor((c) => c["failed"] === 6, 30_000);
  } finally {
    client.close();
  }
});
