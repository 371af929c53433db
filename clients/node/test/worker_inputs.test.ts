/** What a worker is given that it must refuse, as the Python worker does: options of the
 * wrong type (one string for its queues). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Worker, type WorkerOptions } from "../src/index.js";

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
