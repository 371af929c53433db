/** `nodes` through the real server: a page at a time, as `listJobs` pages jobs (20 unless
 * told, 1 to 1,000), `next_before` the `before` of the next page; a cursor that is not one
 * is the server's `invalid`, and nothing changes. */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, HopperError } from "../src/index.js";
import { Server, psql } from "./server.js";

let server: Server;
let client: Client;
before(async () => {
  server = await Server.start();
  client = await Client.connect(server.endpoint, { token: server.token });
  // 24 nodes in the server's database, as runtimes register them, their last heartbeat an
  // hour ahead so that the server does not release them as silent meanwhile.
  const rows = Array.from({ length: 24 }, (_, n) =>
    `(gen_random_uuid(), 'node-${String(n).padStart(2, "0")}', '{default}', 1, now(), now() + interval '1 hour')`);
  psql(`INSERT INTO ${server.schema}.nodes (id, name, queues, concurrency, started_at, heartbeat_at) VALUES ${rows.join(", ")}`);
});
after(async () => {
  client.close();
  await server.stop();
});

const ids = (nodes: Record<string, unknown>[]): unknown[] => nodes.map((n) => n["id"]);

test("nodes are listed 20 a page by name, and pages of any size walk them once", async () => {
  const first = await client.nodes();
  assert.equal(first.nodes.length, 20);
  assert.equal(typeof first.next_before, "string");
  const rest = await client.nodes({ before: first.next_before ?? "" });
  assert.equal(rest.next_before, null);
  const every = [...first.nodes, ...rest.nodes];
  // Those 24 and the server's own, by name byte by byte.
  const names = every.map((n) => String(n["name"]));
  assert.equal(new Set(ids(every)).size, 25);
  assert.deepEqual(names, [...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));

  const walked: unknown[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await client.nodes({ limit: 7, before: cursor });
    assert.ok(page.nodes.length <= 7);
    walked.push(...ids(page.nodes));
    if (page.next_before === null) break;
    cursor = page.next_before;
  }
  assert.deepEqual(walked, ids(every));
  assert.deepEqual(await client.nodes({ limit: 1000 }), { nodes: every, next_before: null });
});

test("a cursor that is not one is refused by the server, naming it", async () => {
  const whole = await client.nodes({ limit: 1000 });
  for (const cursor of ["zzz", "", String(whole.nodes[0]?.["id"]), `${"A".repeat(10_000)}!`]) {
    await assert.rejects(client.nodes({ before: cursor }), (e: unknown) =>
      e instanceof HopperError && e.code === "invalid" && /before: .*next_before/.test(e.message));
  }
  assert.deepEqual(await client.nodes({ limit: 1000 }), whole, "nothing changed");
});
