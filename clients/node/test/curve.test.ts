/** CURVE: a server started with --curve serves peers that know its public key, and nobody
 * else gets a single request through. */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { encode } from "cbor-x";
import { Dealer, curveKeyPair } from "zeromq";

import { Client, Unavailable, Worker } from "../src/index.js";
import { Server, sleep } from "./server.js";

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
  // Raw DEALERs with the right token, asking straight away, one in plaintext and one
  // encrypting to another key: no reply, nothing written.
  for (const serverKey of [undefined, curveKeyPair().publicKey]) {
    const raw = new Dealer({ linger: 0, receiveTimeout: 2_000 });
    if (serverKey !== undefined) {
      const own = curveKeyPair();
      raw.curveServerKey = serverKey;
      raw.curvePublicKey = own.publicKey;
      raw.curveSecretKey = own.secretKey;
    }
    raw.connect(server.endpoint);
    await raw.send(encode({ type: "hello", req: 1, version: 1, role: "client", token: server.token }));
    await raw.send(encode({ type: "submit", req: 2, job: { kind: "k" } }));
    await assert.rejects(raw.receive(), /EAGAIN|timed out|Socket timed out/i);
    raw.close();
  }
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

test("workers reconnect to a restarted CURVE server and finish every job", async () => {
  const own = await Server.start({ extra: ["--curve"] });
  const workers: { worker: Worker; done: Promise<void> }[] = [];
  try {
    const key = own.serverKey;
    assert.ok(key, "the server printed its key");
    const client = await Client.connect(own.endpoint, { token: own.token, serverKey: key });
    let ids: string[];
    try {
      ids = await client.submitBatch(Array.from({ length: 1_000 }, (_, n) => ({ kind: "nap", args: { n } })));
    } finally {
      client.close();
    }
    const runs = new Map<string, number>();
    for (let i = 0; i < 2; i++) {
      const worker = new Worker(own.endpoint, { token: own.token, serverKey: key, concurrency: 8, name: `curve-node${i}`, stopOnSignals: false });
      worker.handle("nap", async (job) => {
        await sleep(5);
        runs.set(job.id, (runs.get(job.id) ?? 0) + 1);
      });
      workers.push({ worker, done: worker.run() });
    }
    await own.waitFor((c) => (c["completed"] ?? 0) >= 200);
    await own.kill("SIGKILL");
    await sleep(500);
    await own.start();
    assert.equal(own.serverKey, key, "the restarted server kept its key pair");
    await own.waitFor((c) => c["completed"] === 1_000, 120_000);
    // At least 800 jobs completed after the restart: only the reconnected workers ran them.
    assert.deepEqual([...runs.keys()].sort(), [...ids].sort());
  } finally {
    for (const { worker } of workers) worker.stop();
    await Promise.all(workers.map((w) => w.done));
    await own.stop();
  }
});
