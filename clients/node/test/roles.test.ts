/** Token roles through the real server: a client token neither runs jobs nor administers,
 * a worker token runs jobs but does not administer, an admin token does everything. */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import { decode, encode } from "cbor-x";
import { Dealer } from "zeromq";

import { Client, HopperError, Worker } from "../src/index.js";
import { Server } from "./server.js";

const clientToken = randomBytes(16).toString("hex");
const workerToken = randomBytes(16).toString("hex");
const adminToken = randomBytes(16).toString("hex");

let server: Server;
before(async () => {
  server = await Server.start({
    tokens: `# roles\nclient ${clientToken}\nworker ${workerToken}\n${adminToken}\n`,
  });
});
after(async () => {
  await server.stop();
});

function unauthorized(role: string): (e: unknown) => boolean {
  return (e: unknown) => e instanceof HopperError && e.code === "unauthorized" && e.message.includes(`role is ${role}`);
}

/** A raw peer's request and its reply (the next frame that carries its `req`). */
async function ask(peer: Dealer, message: Record<string, unknown>): Promise<Record<string, unknown>> {
  await peer.send(encode(message));
  for (;;) {
    const [frame] = await peer.receive();
    const reply = decode(frame as Buffer) as Record<string, unknown>;
    if (reply["req"] === message["req"]) return reply;
  }
}

test("a client token submits and reads, but neither runs jobs nor administers", async () => {
  const client = await Client.connect(server.endpoint, { token: clientToken });
  try {
    const id = await client.submit("k", {});
    assert.equal((await client.status(id)).state, "available");
    await assert.rejects(client.listJobs(), unauthorized("client"));
    await assert.rejects(client.queueStats(), unauthorized("client"));
    await assert.rejects(client.retryFailed(), unauthorized("client"));

    // As a worker: the hello is refused, and so are a worker's messages on a client session.
    const worker = new Worker(server.endpoint, { token: clientToken, stopOnSignals: false });
    worker.handle("k", () => {});
    await assert.rejects(worker.run(), (e: unknown) => e instanceof HopperError && e.code === "unauthorized");
    const raw = new Dealer({ linger: 0, receiveTimeout: 10_000 });
    raw.connect(server.endpoint);
    try {
      const welcome = await ask(raw, { type: "hello", req: 1, version: 1, role: "client", token: clientToken });
      assert.equal(welcome["type"], "welcome");
      const asWorker = [
        { type: "heartbeat", req: 2, leases: [{ id, attempt: 1 }] },
        { type: "completed", req: 3, id, attempt: 1, duration_ms: 1 },
        { type: "extend", req: 4, id, attempt: 1, by_ms: 1_000 },
      ];
      for (const message of asWorker) {
        const reply = await ask(raw, message);
        assert.equal(reply["code"], "unauthorized", JSON.stringify(reply));
        assert.match(String(reply["message"]), /role is client/);
      }
    } finally {
      raw.close();
    }
    assert.deepEqual(server.counts(), { available: 1 }, "nothing ran, nothing changed");
  } finally {
    client.close();
  }
});

test("a worker token runs jobs but does not administer", async () => {
  const worker = new Worker(server.endpoint, { token: workerToken, stopOnSignals: false });
  let ran = 0;
  worker.handle("k", () => {
    ran += 1;
  });
  const running = worker.run();
  const client = await Client.connect(server.endpoint, { token: workerToken });
  try {
    await server.waitFor((c) => c["completed"] === 1);
    // At least once: on a loaded machine a worker silent for three 300 ms heartbeats is
    // dropped and its job run again.
    assert.ok(ran >= 1);
    await assert.rejects(client.listJobs(), unauthorized("worker"));
    await assert.rejects(client.clear(), unauthorized("worker"));
    await assert.rejects(client.updateQueue("default", { paused: true }), unauthorized("worker"));
  } finally {
    client.close();
    worker.stop();
    await running;
  }
});

test("an admin token administers", async () => {
  const client = await Client.connect(server.endpoint, { token: adminToken });
  try {
    assert.equal((await client.listJobs()).length, 1);
    assert.ok((await client.queueStats()).length >= 1);
  } finally {
    client.close();
  }
});
