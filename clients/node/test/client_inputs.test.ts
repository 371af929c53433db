/** What the client refuses before sending, as the Python client does: filters and settings
 * that are unknown or of the wrong type, `Date`s that are invalid, ids that are not text,
 * text that UTF-8 cannot encode; each a clear `TypeError` or `RangeError` (or, for what only
 * the encoder sees, `HopperError` `invalid` at once), and nothing changed on the server. */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, HopperError } from "../src/index.js";
import { refuses } from "./assertions.js";
import { Server } from "./server.js";

let server: Server;
let client: Client;
before(async () => {
  server = await Server.start();
  client = await Client.connect(server.endpoint, { token: server.token, timeoutMs: 3_000 });
});
after(async () => {
  client.close();
  await server.stop();
});

/** The client, to call with arguments its types forbid (as plain JavaScript may). */
function loose(): Record<string, (...args: unknown[]) => Promise<unknown>> {
  return client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
}

test("listJobs takes Dates and RFC 3339 text for its instants, and checks every filter", async () => {
  const id = await client.submit("dated", {});
  const hourAgo = new Date(Date.now() - 3_600_000);
  const inAnHour = new Date(Date.now() + 3_600_000);
  const ids = async (filter: Parameters<Client["listJobs"]>[0]): Promise<string[]> => (await client.listJobs(filter)).map((j) => j.id);
  assert.deepEqual(await ids({ createdAfter: hourAgo }), [id]);
  assert.deepEqual(await ids({ createdAfter: hourAgo.toISOString() }), [id]);
  assert.deepEqual(await ids({ createdAfter: "2020-01-01T00:00:00+02:00", createdBefore: inAnHour }), [id]);
  assert.deepEqual(await ids({ createdBefore: hourAgo }), []);
  assert.deepEqual(await ids({ createdAfter: inAnHour }), []);
  assert.deepEqual(await ids({ createdAfter: undefined, kind: "dated", limit: 1 }), [id], "undefined is left out");

  const list = (filter: unknown): Promise<unknown> => loose()["listJobs"]!(filter);
  await refuses(() => list({ createdAfter: new Date(NaN) }), RangeError, /^createdAfter is an invalid Date$/);
  await refuses(() => list({ createdBefore: new Date("not a date") }), RangeError, /^createdBefore is an invalid Date$/);
  await refuses(() => list({ createdAfter: 1_800_000_000 }), TypeError, /^createdAfter must be a Date or RFC 3339 text, not a number$/);
  await refuses(() => list({ createdBefore: {} }), TypeError, /^createdBefore must be a Date or RFC 3339 text, not an Object$/);
  await refuses(() => list({ stat: "failed" }), TypeError, /^unknown job filters: "stat" \(expected some of queue, state, kind, group, meta, before, createdAfter, createdBefore, limit\)$/);
  await refuses(() => list({ created_after: hourAgo }), TypeError, /^unknown job filters: "created_after"/);
  await refuses(() => list({ limit: "5" }), TypeError, /^limit must be an integer, not a string$/);
  await refuses(() => list({ limit: 0 }), RangeError, /^limit must be an integer from 1 to 1,000, got 0$/);
  await refuses(() => list({ queue: 5 }), TypeError, /^queue must be a string, not a number$/);
  await refuses(() => list({ before: null }), TypeError, /^before must be a string, not null$/);
  await refuses(() => list({ group: 7 }), TypeError, /^group must be a string, not a number$/);
  await refuses(() => list({ meta: { at: new Date(0) } }), TypeError, /^meta/);
  await refuses(() => list("failed"), TypeError, /^the job filters must be a plain object, not a string$/);
});

test("nodes takes a limit and a text cursor, checked as listJobs checks them", async () => {
  const nodes = (page: unknown): Promise<unknown> => loose()["nodes"]!(page);
  await refuses(() => nodes({ limit: 0 }), RangeError, /^limit must be an integer from 1 to 1,000, got 0$/);
  await refuses(() => nodes({ limit: -1 }), RangeError, /^limit must be an integer from 1 to 1,000, got -1$/);
  await refuses(() => nodes({ limit: 1001 }), RangeError, /^limit must be an integer from 1 to 1,000, got 1001$/);
  await refuses(() => nodes({ limit: 2.5 }), RangeError, /^limit must be an integer from 1 to 1,000, got 2.5$/);
  await refuses(() => nodes({ limit: Number.MAX_SAFE_INTEGER * 4 }), RangeError, /^limit must be an integer/);
  await refuses(() => nodes({ limit: "5" }), TypeError, /^limit must be an integer, not a string$/);
  await refuses(() => nodes({ before: 5 }), TypeError, /^before must be a string, not a number$/);
  await refuses(() => nodes({ before: null }), TypeError, /^before must be a string, not null$/);
  await refuses(() => nodes({ before: "AZC0\udc80" }), RangeError, /^before /);
  await refuses(() => nodes({ after: "AZC0" }), TypeError, /^unknown node page fields: "after" \(expected some of before, limit\)$/);
  await refuses(() => nodes(20), TypeError, /^the node page fields must be a plain object, not a number$/);
  assert.equal((await client.nodes({ limit: 1, before: undefined })).nodes.length, 1, "undefined is left out");
});

test("updateQueue takes the known settings only, of JSON values, for a queue named by text", async () => {
  const update = (queue: unknown, settings: unknown): Promise<unknown> => loose()["updateQueue"]!(queue, settings);
  await refuses(() => update("mail", { pausd: true }), TypeError, /^unknown queue settings: "pausd" \(expected some of paused, max_running, max_running_per_group, rate\)$/);
  await refuses(() => update("mail", { queue: "other", paused: true }), TypeError, /^unknown queue settings: "queue"/);
  await refuses(() => update("mail", { max_running: NaN }), RangeError, /^the queue settings\.max_running is NaN/);
  await refuses(() => update("mail", { rate: { jobs: 1, per_ms: 10n ** 30n } }), RangeError, /^the queue settings\.rate\.per_ms: .* does not fit in 64 bits/);
  await refuses(() => update("mail", { rate: { jobs: 1, per_ms: () => 1000 } }), TypeError, /^the queue settings\.rate\.per_ms is a function/);
  await refuses(() => update(["mail"], { paused: true }), TypeError, /^queue must be a string, not an array$/);
  await refuses(() => update("mail", null), TypeError, /^the queue settings must be a plain object, not null$/);
  assert.deepEqual(await client.queues(), [], "nothing was changed");

  const stored = await client.updateQueue("mail", { paused: true, max_running: undefined, rate: null });
  assert.equal(stored["queue"], "mail");
  assert.equal(stored["paused"], true);
});

test("submit refuses unknown options, submitBatch unknown fields and what is not an array", async () => {
  const before = server.counts();
  const submit = (...args: unknown[]): Promise<unknown> => loose()["submit"]!(...args);
  const batch = (jobs: unknown): Promise<unknown> => loose()["submitBatch"]!(jobs);
  await refuses(() => submit("k", {}, { delay_ms: 5_000 }), TypeError, /^unknown job options: "delay_ms" \(expected some of queue, priority, runAt, delayMs, maxAttempts, timeoutMs, meta\)$/);
  await refuses(() => submit("k", {}, { kind: "other" }), TypeError, /^unknown job options: "kind"/);
  await refuses(() => submit("k", {}, null), TypeError, /^the job options must be a plain object, not null$/);
  await refuses(() => batch([{ kind: "k" }, { kind: "k", run_at: "2030-01-01T00:00:00Z" }]), TypeError, /^unknown job fields of jobs\[1\]: "run_at"/);
  await refuses(() => batch({ kind: "k" }), TypeError, /^jobs must be an array of jobs, not an Object$/);
  await refuses(() => batch(["k"]), TypeError, /^the job fields of jobs\[0\] must be a plain object, not a string$/);
  await refuses(() => batch(Array.from({ length: 10_001 }, () => ({ kind: "k" }))), RangeError, /^a batch holds at most 10,000 jobs, got 10,001: submit larger ones in several batches$/);
  assert.deepEqual(server.counts(), before, "nothing was submitted");
});

test("ids, queues, kinds and minutes of the wrong type are refused before sending", async () => {
  const call = (method: string, ...args: unknown[]): Promise<unknown> => loose()[method]!(...args);
  for (const method of ["status", "jobLogs", "cancel", "retry", "delete"]) {
    await refuses(() => call(method, 42), TypeError, /^id must be a string, not a number$/);
  }
  await refuses(() => call("clear", 5), TypeError, /^queue must be a string, not a number$/);
  await refuses(() => call("retryFailed", { queue: "q", state: "failed" }), TypeError, /^unknown retryFailed filters: "state" \(expected some of queue, kind\)$/);
  await refuses(() => call("retryFailed", { kind: 3 }), TypeError, /^kind must be a string, not a number$/);
  await refuses(() => call("jobStats", "5"), TypeError, /^minutes must be an integer, not a string$/);
  // The range stays the server's to say.
  await assert.rejects(client.jobStats(0), (e: unknown) => e instanceof HopperError && e.code === "invalid");
});

test("text that UTF-8 cannot encode is refused at once, naming where it is", async () => {
  const before = server.counts();
  await refuses(() => client.submit("k", { name: "ab\uD800c" }), RangeError, /^args\.name holds a lone surrogate at index 2, which UTF-8 cannot encode/);
  await refuses(() => client.submit("k", {}, { meta: { ["\uDC00"]: 1 } }), RangeError, /^meta: the key "\\udc00" holds a lone surrogate/);
  await refuses(() => client.submit("k\uDBFF"), RangeError, /^kind holds a lone surrogate at index 1/);
  await refuses(() => client.status("\uD83D"), RangeError, /^id holds a lone surrogate/);
  // A pair is text: it goes.
  const id = await client.submit("k", { face: "\uD83D\uDE00" });
  assert.deepEqual((await client.status(id)).args, { face: "😀" });
  // What the checks above do not see (a priority is the server's to read) is refused by the
  // encoder at once, not sent as bytes the server cannot read (and so never answers).
  const started = Date.now();
  await assert.rejects(
    client.submit("k", {}, { priority: "high\uD800" as "high" }),
    (e: unknown) => e instanceof HopperError && e.code === "invalid" && /cannot encode submit: submit\.job\.priority holds a lone surrogate/.test(e.message),
  );
  assert.ok(Date.now() - started < 1_000, "refused at once");
  assert.deepEqual(server.counts(), { available: (before["available"] ?? 0) + 1 });
});
