/** Bad frames and unauthenticated peers are refused; a good peer keeps working. */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { decode, encode } from "cbor-x";
import { Dealer } from "zeromq";

import { Client, type Message } from "../src/index.js";
import { Server } from "./server.js";

let server: Server;
before(async () => {
  server = await Server.start();
});
after(async () => {
  await server.stop();
});

/** A bare DEALER that sends one frame (after an empty delimiter if asked) and reads the reply. */
async function ask(socket: Dealer, frame: Uint8Array, delimiter = false): Promise<Message> {
  await socket.send(delimiter ? [new Uint8Array(0), frame] : [frame]);
  const frames = await socket.receive();
  return decode(frames[frames.length - 1] ?? new Uint8Array(0)) as Message;
}

test("bad frames and strangers never disturb a good peer", async () => {
  const client = await Client.connect(server.endpoint, { token: server.token });
  const good = (async () => {
    const ids: string[] = [];
    for (let n = 0; n < 300; n++) ids.push(await client.submit("good", { n }));
    return ids;
  })();

  const s = new Dealer({ linger: 0, receiveTimeout: 10_000 });
  s.connect(server.endpoint);
  try {
    let r = await ask(s, encode({ type: "submit", req: 1, job: { kind: "k" } }));
    assert.deepEqual([r["type"], r["code"], r["req"]], ["error", "unauthorized", 1]);
    r = await ask(s, encode({ type: "hello", req: 2, version: 1, role: "client", token: "nope" }));
    assert.equal(r["code"], "unauthorized");
    r = await ask(s, Buffer.from("\xff\xfe garbage", "latin1"));
    assert.equal(r["code"], "bad_frame");
    r = await ask(s, encode({ type: "hello", req: 3, version: 1, role: "client", token: server.token }), true);
    assert.deepEqual([r["type"], r["req"], r["max_frame"]], ["welcome", 3, 2 * 1024 * 1024]);
    assert.equal((await ask(s, encode([1, 2, 3])))["code"], "bad_frame");
    r = await ask(s, encode({ type: "frobnicate", req: 4 }));
    assert.deepEqual([r["code"], r["req"]], ["unknown_type", 4]);
    assert.equal((await ask(s, encode({ type: "status", req: 5, id: 42 })))["code"], "invalid");
    // cbor-x writes a Date as a CBOR tag: the protocol wants text, so it is refused.
    const tagged = { type: "submit", req: 6, job: { kind: "k", run_at: new Date() } };
    assert.equal((await ask(s, encode(tagged)))["code"], "invalid");
    const big = { type: "submit", req: 7, job: { kind: "k", args: { x: "y".repeat(3 << 20) } } };
    assert.equal((await ask(s, encode(big)))["code"], "too_large");
    r = await ask(s, encode({ type: "heartbeat", req: 8, leases: [] }));
    assert.deepEqual(r, { type: "heartbeat_ack", req: 8, lost: [] });
  } finally {
    s.close();
  }
  const ids = await good;
  client.close();
  assert.equal(new Set(ids).size, 300);
});

test("a server run with --insecure-no-auth needs no token", async () => {
  const open = await Server.start({ extra: ["--insecure-no-auth"] });
  const client = await Client.connect(open.endpoint, { token: "" });
  try {
    const id = await client.submit("k", {});
    assert.equal((await client.status(id)).state, "available");
  } finally {
    client.close();
    await open.stop();
  }
});
