/** CURVE: a server started with --curve serves peers that know its public key, and nobody
 * else gets a single request through. */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { encode } from "cbor-x";
import { Dealer, curveKeyPair } from "zeromq";

import { Client, Unavailable, Worker } from "../src/index.js";
import { Server } from "./server.js";

let server: Server;
before(async () => {
  server = await Server.start({ extra: ["--curve"] });
});
after(async () => {
  await server.stop();
});

test("a client and a worker with the server key work", async () => {
  assert.ok(server.serverKey, "the server printed its key");
  const worker = new Worker(server.endpoint, { token: server.token, serverKey: server.serverKey, concurrency: 4, stopOnSignals: false });
  worker.handle("k", () => {});
  const running = worker.run();
  const client = await Client.connect(server.endpoint, { token: server.token, serverKey: server.serverKey });
  try {
    const ids = await client.submitBatch(Array.from({ length: 50 }, (_, n) => ({ kind: "k", args: { n } })));
    await server.waitFor((c) => c["completed"] === 50);
    assert.equal((await client.status(ids[0] ?? "")).state, "completed");
  } finally {
    client.close();
    worker.stop();
    await running;
  }
});

test("plaintext and wrong-key peers get nothing through", async () => {
  const before = server.counts();
  for (const serverKey of [undefined, curveKeyPair().publicKey]) {
    const started = Date.now();
    await assert.rejects(
      Client.connect(server.endpoint, { token: server.token, serverKey, timeoutMs: 2_000 }),
      (e: unknown) => e instanceof Unavailable && /serverKey/.test(e.message),
    );
    assert.ok(Date.now() - started < 10_000);
  }
  // A plaintext DEALER with the right token, asking straight away: no reply, nothing written.
  const raw = new Dealer({ linger: 0, receiveTimeout: 2_000 });
  raw.connect(server.endpoint);
  await raw.send(encode({ type: "hello", req: 1, version: 1, role: "client", token: server.token }));
  await raw.send(encode({ type: "submit", req: 2, job: { kind: "k" } }));
  await assert.rejects(raw.receive(), /EAGAIN|timed out|Socket timed out/i);
  raw.close();
  assert.deepEqual(server.counts(), before);

  // The server is unharmed: a peer with the key is served at once.
  const client = await Client.connect(server.endpoint, { token: server.token, serverKey: server.serverKey });
  try {
    assert.equal((await client.status(await client.submit("k", {}))).state, "available");
  } finally {
    client.close();
  }
});

test("a bad server key is refused before connecting", async () => {
  await assert.rejects(Client.connect("tcp://127.0.0.1:1", { serverKey: "too short" }), TypeError);
  await assert.rejects(Client.connect("tcp://127.0.0.1:1", { serverKey: "~".repeat(40) }), TypeError);
});
