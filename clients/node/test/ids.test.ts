/** Job ids are UUIDv7 and increase, within one millisecond too (docs/protocol.md §5). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { jobSpec, Uuid7Generator, uuid7 } from "../src/index.js";
import { ID } from "./server.js";

const millis = (id: string): number => Number(BigInt(`0x${id.replaceAll("-", "")}`) >> 80n);
const sorted = (ids: string[]): string[] => [...ids].sort();

test("ids are version 7 with the current time", () => {
  const before = Date.now();
  const id = uuid7();
  const after = Date.now();
  assert.match(id, ID);
  assert.equal(id[14], "7");
  assert.ok("89ab".includes(id[19] ?? ""), "RFC 9562 variant");
  assert.ok(before <= millis(id) && millis(id) <= after);
});

test("ids made in the same millisecond increase", () => {
  const make = new Uuid7Generator(() => 1_600_000_000_000);
  const ids = Array.from({ length: 10_000 }, () => make.next());
  assert.deepEqual(ids, sorted(ids));
  assert.equal(new Set(ids).size, ids.length);
  assert.deepEqual(new Set(ids.map(millis)), new Set([1_600_000_000_000]));
});

test("ids increase when the clock steps back", () => {
  let now = 1_650_000_000_000;
  const make = new Uuid7Generator(() => now);
  const first = make.next();
  now -= 1_000;
  const later = Array.from({ length: 100 }, () => make.next());
  assert.deepEqual([first, ...later], sorted([first, ...later]));
});

test("ids carry into the next millisecond when the counter is full", () => {
  const make = new Uuid7Generator(() => 1_600_000_000_000);
  make.setState(1_600_000_000_000, (1n << 74n) - 3n);
  const ids = [make.next(), make.next(), make.next()];
  assert.deepEqual(ids, sorted(ids));
  assert.deepEqual(ids.map(millis), [1_600_000_000_000, 1_600_000_000_000, 1_600_000_000_001]);
});

test("a batch gets increasing ids in submission order", () => {
  const ids = Array.from({ length: 1_000 }, (_, n) => String(jobSpec({ kind: "k", args: { n } })["id"]));
  assert.deepEqual(ids, sorted(ids));
});
