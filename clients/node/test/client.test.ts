/** Submit, status, cancel and the admin requests through the real server. */

import assert from "node:assert/strict";
import { statSync } from "node:fs";
import { after, before, test } from "node:test";

import { Client, HopperError } from "../src/index.js";
import { ID, Server, psql } from "./server.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

async function refused(call: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(call, (e: unknown) => e instanceof HopperError && e.code === code);
}

test("the generated token file is private and required", async () => {
  assert.equal(statSync(server.tokenFile).mode & 0o777, 0o600);
  await refused(Client.connect(server.endpoint, { token: "not-the-token", timeoutMs: 5_000 }), "unauthorized");
});

test("integers past 32 bits come back as numbers, as JSON.parse reads them", async () => {
  // Written as integers, as a Rust or Python client or SQL writes them (Node sends such
  // numbers as doubles), they come back in CBOR's 8-byte integers.
  const args = { at: 1_700_000_000_000, below: -(2 ** 40), safe: Number.MAX_SAFE_INTEGER, small: 7 };
  const id = psql(`SELECT ${server.schema}.enqueue('wide', '${JSON.stringify(args)}', 'wide')`);
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const job = await client.status(id);
    assert.deepEqual(job.args, args);
    assert.equal(JSON.stringify(job.args), JSON.stringify(args));
    // Past 2^53 − 1 an integer stays a bigint, exact.
    const wide = psql(`SELECT ${server.schema}.enqueue('wide', '{"n": 9223372036854775807}', 'wide')`);
    assert.deepEqual((await client.status(wide)).args, { n: 2n ** 63n - 1n });
  } finally {
    client.close();
  }
});

test("submit, status, cancel", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const id = await client.submit("email", { to: "ada@example.com" }, { queue: "mail", priority: "high", maxAttempts: 3 });
    assert.match(id, ID);
    const job = await client.status(id);
    assert.equal(job.state, "available");
    assert.equal(job.queue, "mail");
    assert.equal(job.priority, 1);
    assert.equal(job.max_attempts, 3);
    assert.deepEqual(job.args, { to: "ada@example.com" });

    const later = await client.submit("email", {}, { delayMs: 60_000 });
    assert.equal((await client.status(later)).state, "scheduled");
    const at = await client.submit("email", {}, { runAt: new Date(Date.now() + 3_600_000) });
    assert.equal((await client.status(at)).state, "scheduled");

    assert.equal((await client.cancel(id)).state, "cancelled");
    await refused(client.cancel(id), "conflict");
    await refused(client.status("0190f3c2-7a1e-7c3b-9d2e-5b8f1a2c3d4e"), "not_found");
    await refused(client.submit("bad kind!", {}), "invalid");

    const ids = await client.submitBatch(Array.from({ length: 500 }, (_, n) => ({ kind: "batch", args: { n } })));
    assert.equal(new Set(ids).size, 500);
    assert.deepEqual((await client.queueStats()).find((q) => q["queue"] === "default")?.["available"], 500);
  } finally {
    client.close();
  }
});

test("admin requests", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const ids: string[] = [];
    for (let n = 0; n < 3; n++) ids.push(await client.submit("k", { n }, { queue: "admin" }));
    // Newest first: the ids are UUIDv7, so the last submitted is listed first.
    const listed = (await client.listJobs({ queue: "admin", limit: 3 })).map((j) => j.id);
    assert.deepEqual(listed, [...ids].reverse());
    const older = (await client.listJobs({ queue: "admin", before: listed[0] ?? "" })).map((j) => j.id);
    assert.deepEqual(older, listed.slice(1));
    await client.cancel(ids[0] ?? "");
    assert.equal((await client.retry(ids[0] ?? "")).state, "available");
    await client.cancel(ids[1] ?? "");
    await client.delete(ids[1] ?? "");
    await refused(client.status(ids[1] ?? ""), "not_found");
    const paused = await client.updateQueue("admin", { paused: true, max_running: 3 });
    assert.equal(paused["paused"], true);
    assert.equal(paused["max_running"], 3);
    const lifted = await client.updateQueue("admin", { max_running: null });
    assert.equal(lifted["max_running"], null);
    assert.deepEqual((await client.queues()).map((q) => q["queue"]), ["admin"]);
    assert.deepEqual(await client.cron(), []);
    // The server registered itself; nothing has finished yet.
    const { nodes, next_before } = await client.nodes();
    assert.equal(nodes.length, 1);
    assert.equal(next_before, null);
    assert.deepEqual(Object.keys(nodes[0] ?? {}).sort(), [
      "concurrency", "heartbeat_at", "id", "name", "queues", "started_at",
    ]);
    assert.deepEqual(await client.jobStats(), []);
    await refused(client.jobStats(0), "invalid");
    await refused(client.jobStats(1441), "invalid");
    assert.equal(await client.retryFailed({ queue: "admin" }), 0);
    assert.equal(await client.clear("admin"), 2);
  } finally {
    client.close();
  }
});

test("a batch is listed newest first and paged in order", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    const ids = await client.submitBatch(Array.from({ length: 50 }, (_, n) => ({ kind: "k", queue: "paged", args: { n } })));
    const first = (await client.listJobs({ queue: "paged", limit: 30 })).map((j) => j.id);
    const rest = (await client.listJobs({ queue: "paged", limit: 30, before: first[first.length - 1] ?? "" })).map((j) => j.id);
    assert.deepEqual([...first, ...rest], [...ids].reverse());
  } finally {
    client.close();
  }
});

test("a listing leaves out values over 4 KiB, pages past the frame size and filters by group and meta", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  try {
    // 300 jobs of 4,004-byte args and 4,011-byte meta, both listed: about 2.4 MB, more
    // than one reply of 2 MiB holds. Then one whose args are left out.
    const args = ["x".repeat(4_000)];
    const meta = { note: "n".repeat(3_998) };
    const ids: string[] = [];
    for (let batch = 0; batch < 3; batch++) {
      ids.push(...(await client.submitBatch(Array.from({ length: 100 }, () => ({ kind: "k", queue: "sized", args, meta })))));
    }
    const big = await client.submit("k", ["y".repeat(100_000 - 4)], { queue: "sized" });
    const listed = await client.listJobs({ queue: "sized", limit: 1000 });
    assert.deepEqual(listed.map((j) => j.id), [big, ...ids.reverse()]);
    assert.equal(listed[0]?.args, null);
    assert.equal(listed[0]?.args_bytes, 100_000);
    assert.deepEqual(listed[1]?.args, args);
    assert.deepEqual(listed[1]?.meta, meta);
    assert.equal(listed[1]?.args_bytes, undefined);
    assert.deepEqual((await client.status(big)).args, ["y".repeat(100_000 - 4)]);

    const [eu, us] = [
      await client.submit("k", {}, { queue: "tenants", meta: { region: "eu" } }),
      await client.submit("k", {}, { queue: "tenants", meta: { region: "us" } }),
    ];
    psql(`UPDATE ${server.schema}.jobs SET group_key = 'a' WHERE id = '${us}'`);
    const ids_of = async (filter: Parameters<Client["listJobs"]>[0]): Promise<string[]> => (await client.listJobs(filter)).map((j) => j.id);
    assert.deepEqual(await ids_of({ queue: "tenants", meta: { region: "eu" } }), [eu]);
    assert.deepEqual(await ids_of({ queue: "tenants", group: "a" }), [us]);
  } finally {
    client.close();
  }
});
