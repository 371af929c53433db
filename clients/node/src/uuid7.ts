/**
 * UUIDv7 job ids (RFC 9562), increasing within this process.
 *
 * The protocol asks for UUIDv7 ids: the server lists jobs newest first by id, pages with
 * `before`, and runs the jobs of one priority submitted at the same instant (a batch) in id
 * order. So ids made in the same millisecond must still increase: the 74 bits after the
 * timestamp start random each millisecond (top bit clear, leaving room to count) and count
 * up by one within it (RFC 9562 §6.2, method 2). If the clock steps back, the last timestamp
 * is kept and the count goes on; if the count would overflow, the timestamp moves one
 * millisecond forward.
 */

import { randomBytes } from "node:crypto";

const RANDOM_BITS = 74n;
const RANDOM_MAX = (1n << RANDOM_BITS) - 1n;

/** Makes increasing UUIDv7s. `clock` gives Unix milliseconds. */
export class Uuid7Generator {
  private lastMs = -1;
  private lastRandom = 0n;

  constructor(private readonly clock: () => number = Date.now) {}

  /** A new UUIDv7 as hyphenated lower-case text, greater than every one made before. */
  next(): string {
    const now = this.clock();
    if (now > this.lastMs) {
      this.lastMs = now;
      this.lastRandom = fresh();
    } else if (this.lastRandom < RANDOM_MAX) {
      this.lastRandom += 1n;
    } else {
      this.lastMs += 1;
      this.lastRandom = fresh();
    }
    const ms = BigInt(this.lastMs) & ((1n << 48n) - 1n);
    const randA = this.lastRandom >> 62n;
    const randB = this.lastRandom & ((1n << 62n) - 1n);
    const value = (ms << 80n) | (0x7n << 76n) | (randA << 64n) | (0b10n << 62n) | randB;
    const hex = value.toString(16).padStart(32, "0");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  /** Test hook: the state after the last id (milliseconds, counted bits). */
  setState(ms: number, random: bigint): void {
    this.lastMs = ms;
    this.lastRandom = random;
  }
}

/** 73 random bits: a new millisecond's starting count. */
function fresh(): bigint {
  const bytes = randomBytes(10);
  return BigInt(`0x${bytes.toString("hex")}`) >> 7n;
}

const shared = new Uuid7Generator();

/** A new UUIDv7 from the process's generator: every id the client makes comes from it. */
export function uuid7(): string {
  return shared.next();
}
