/**
 * Checking what a caller gives before it is sent: the protocol's values are JSON-compatible
 * (no CBOR tags, no `undefined`, no NaN: docs/protocol.md §2), its durations bounded (§3), so
 * a bad value is a clear local error instead of the server's refusal (or, for a log line, a
 * value made loggable instead of a lost batch).
 */

/** The longest duration the server takes (`delay_ms`, `by_ms`, `retry_in_ms`): ten years of
 * 365 days, in milliseconds (docs/protocol.md §3, "Ranges"). */
export const MAX_DURATION_MS = 315_360_000_000;
/** The integers the protocol carries: signed or unsigned 64-bit. */
const MIN_INT = -(2n ** 63n);
const MAX_INT = 2n ** 64n - 1n;
/** How deep a value may nest (the server refuses a frame nesting deeper than 256 levels,
 * the message's own maps included). */
const MAX_DEPTH = 200;
/** Past this depth, a log field's value is written as its `String()`. */
const MAX_LOG_DEPTH = 32;

const JSON_TYPES = "plain objects, arrays, strings, finite numbers, booleans and null";

/** Half of a UTF-16 surrogate pair without its other half: text that UTF-8, and so the
 * protocol's CBOR, cannot carry (cbor-x would write bytes the server refuses as not CBOR,
 * without knowing which request they were). */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, "g");

/** `text` with every lone surrogate replaced by U+FFFD (what `String.prototype.toWellFormed`
 * does), so that UTF-8 can encode it. */
export function wellFormed(text: string): string {
  return LONE_SURROGATE.test(text) ? text.replace(LONE_SURROGATES, "\uFFFD") : text;
}

/** `text` if it holds no lone surrogate; a `RangeError` naming `what` and where otherwise. */
function wellFormedOr(text: string, what: string): string {
  const found = LONE_SURROGATE.exec(text);
  if (found !== null) {
    throw new RangeError(`${what} holds a lone surrogate at index ${found.index}, which UTF-8 cannot encode (text.toWellFormed() replaces it)`);
  }
  return text;
}

/** How deep `illFormedText` looks (the server refuses a frame nesting past 256 levels). */
const MAX_SCAN_DEPTH = 256;

/** The path (under `path`) of the first string or key of `value` that holds a lone
 * surrogate, or undefined when there is none (looking 256 levels deep at most). */
export function illFormedText(value: unknown, path: string, depth = 0): string | undefined {
  if (typeof value === "string") return LONE_SURROGATE.test(value) ? path : undefined;
  if (value === null || typeof value !== "object" || depth >= MAX_SCAN_DEPTH) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = illFormedText(value[i], child(path, i), depth + 1);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    if (LONE_SURROGATE.test(key)) return `${path}: the key ${JSON.stringify(key)}`;
    const found = illFormedText(item, child(path, key), depth + 1);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** What a value is, for an error message: `undefined`, `a number`, `a Date`, `a Map`... */
export function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (typeof value === "function") return "a function";
  if (typeof value !== "object") return `a ${typeof value}`;
  if (Array.isArray(value)) return "an array";
  let name: unknown;
  try {
    name = (Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  } catch {
    name = undefined;
  }
  if (typeof name !== "string" || name === "") return "an object";
  return /^[AEIO]/.test(name) ? `an ${name}` : `a ${name}`;
}

/** A plain object: made by `{}`, `Object.create(null)` or `JSON.parse` (of any realm). */
function isPlainObject(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === null || proto === Object.prototype) return true;
  const ctor = (proto as { constructor?: { name?: unknown } }).constructor;
  return Object.getPrototypeOf(proto) === null && ctor?.name === "Object";
}

/** `path` followed by the key, as a JS accessor: `args.to`, `args["odd key"]`, `args[3]`. */
function child(path: string, key: string | number): string {
  if (typeof key === "number") return `${path}[${key}]`;
  const shown = key.length > 64 ? `${key.slice(0, 64)}…` : key;
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${shown}` : `${path}[${JSON.stringify(shown)}]`;
}

/** Sets `out[key]`, as an own property even for `__proto__`. */
function put(out: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    out[key] = value;
  }
}

/**
 * A plain copy of `value` if it is JSON-compatible (plain objects, arrays, strings, finite
 * numbers, booleans, null, and bigints within 64 bits); otherwise a `TypeError` (a Date,
 * `undefined`, a function, a Map, a Uint8Array, a class instance, a cycle...) or a
 * `RangeError` (NaN, an infinity, a bigint beyond 64 bits, nesting past 200 levels, a string
 * or key holding a lone surrogate) naming the path of the first bad value under `what`
 * (`args.when`, `jobs[2].meta.tenant`).
 */
export function jsonValue(value: unknown, what: string): unknown {
  return json(value, what, 0, new Set());
}

function json(value: unknown, path: string, depth: number, ancestors: Set<object>): unknown {
  if (value === null || typeof value === "boolean") return value;
  if (typeof value === "string") return wellFormedOr(value, path);
  if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new RangeError(`${path} is ${String(value)}, which is not a JSON number (no NaN nor infinity)`);
    }
    return value;
  }
  if (typeof value === "bigint") {
    if (value < MIN_INT || value > MAX_INT) {
      throw new RangeError(`${path}: the integer ${String(value)} does not fit in 64 bits`);
    }
    return value;
  }
  if (value === undefined) {
    throw new TypeError(`${path} is undefined, which JSON cannot hold: give null, or leave the key out`);
  }
  if (typeof value !== "object") {
    throw new TypeError(`${path} is ${kindOf(value)}, which is not JSON-compatible (${JSON_TYPES})`);
  }
  if (ancestors.has(value)) throw new TypeError(`${path} holds itself (a cycle), which JSON cannot hold`);
  if (depth >= MAX_DEPTH) {
    const where = path.length > 80 ? `${path.slice(0, 80)}…` : path;
    throw new RangeError(`${where} nests deeper than ${MAX_DEPTH} levels`);
  }
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      const out: unknown[] = [];
      for (let i = 0; i < value.length; i++) out.push(json(value[i], child(path, i), depth + 1, ancestors));
      return out;
    }
    if (isPlainObject(value)) {
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(value)) {
        wellFormedOr(key, `${path}: the key ${JSON.stringify(key)}`);
        put(out, key, json(item, child(path, key), depth + 1, ancestors));
      }
      return out;
    }
  } finally {
    ancestors.delete(value);
  }
  const hint = value instanceof Date ? " (send text: date.toISOString())" : " (convert it first: a Date to text, say)";
  throw new TypeError(`${path} is ${kindOf(value)}, which is not JSON-compatible (${JSON_TYPES})${hint}`);
}

/** `String(value)` made well-formed (see `wellFormed`), or a placeholder when that throws
 * (an object without a prototype, a `toString` that throws). Never throws. */
export function safeString(value: unknown): string {
  try {
    return wellFormed(String(value));
  } catch {
    return `<${kindOf(value)} that cannot be shown: its conversion to text threw>`;
  }
}

/**
 * A JSON-compatible copy of a log line's `value`, never throwing: a finite number, boolean
 * or null as is, a string too but for its lone surrogates (see `wellFormed`; keys alike);
 * NaN and the infinities, bigints, `undefined`, symbols as their `String()`; a function as `[Function: name]`; a Date as its ISO text; an object with
 * `toJSON` as what that returns; a Map as an object (keys made text), a Set as an array;
 * plain objects, arrays and other objects without a `toString` of their own (class
 * instances) copied property by property; anything else (an Error, a URL...) as its
 * `String()`. A cycle is `"[Circular]"`; nesting past 32 levels is the `String()` of what is
 * there.
 */
export function loggable(value: unknown, depth = 0, ancestors: Set<object> = new Set()): unknown {
  if (value === null || typeof value === "boolean") return value;
  if (typeof value === "string") return wellFormed(value);
  if (typeof value === "number") return Number.isFinite(value) ? value : String(value);
  if (typeof value === "function") return `[Function: ${safeString((value as { name?: unknown }).name) || "(anonymous)"}]`;
  if (typeof value !== "object") return safeString(value); // undefined, bigint, symbol
  if (ancestors.has(value)) return "[Circular]";
  if (depth >= MAX_LOG_DEPTH) return safeString(value);
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      const out: unknown[] = [];
      for (let i = 0; i < value.length; i++) out.push(loggable(value[i], depth + 1, ancestors));
      return out;
    }
    if (value instanceof Date) return Number.isNaN(value.getTime()) ? "Invalid Date" : value.toISOString();
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") return loggable(toJSON.call(value), depth + 1, ancestors);
    if (value instanceof Map) {
      const out: Record<string, unknown> = {};
      for (const [key, item] of value) put(out, typeof key === "string" ? wellFormed(key) : safeString(key), loggable(item, depth + 1, ancestors));
      return out;
    }
    if (value instanceof Set) return [...value].map((item) => loggable(item, depth + 1, ancestors));
    const toString = (value as { toString?: unknown }).toString;
    if (toString === undefined || toString === Object.prototype.toString) {
      const out: Record<string, unknown> = {};
      for (const [key, item] of Object.entries(value)) put(out, wellFormed(key), loggable(item, depth + 1, ancestors));
      return out;
    }
  } catch {
    // a getter, a proxy or a toJSON that throws: shown as text below
  } finally {
    ancestors.delete(value);
  }
  return safeString(value);
}

/** `value` if it is an integer from `low` to `high`: a `TypeError` (not a number) or a
 * `RangeError` naming `what` otherwise. */
export function integer(value: unknown, what: string, low: number, high: number): number {
  if (typeof value !== "number") throw new TypeError(`${what} must be an integer, not ${kindOf(value)}`);
  if (!Number.isInteger(value) || value < low || value > high) {
    throw new RangeError(`${what} must be an integer from ${low.toLocaleString("en")} to ${high.toLocaleString("en")}, got ${String(value)}`);
  }
  return value;
}

/** `value` if it is a string that UTF-8 can encode: a `TypeError` (not a string) or a
 * `RangeError` (a lone surrogate) naming `what` otherwise. */
export function string(value: unknown, what: string): string {
  if (typeof value !== "string") throw new TypeError(`${what} must be a string, not ${kindOf(value)}`);
  return wellFormedOr(value, what);
}

/** An instant as RFC 3339 text: a valid `Date` (written in UTC), or text passed as is (the
 * server checks it). A `RangeError` for an invalid `Date` (`new Date(NaN)`), a `TypeError`
 * for anything else, naming `what`. */
export function rfc3339(value: unknown, what: string): string {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new RangeError(`${what} is an invalid Date`);
    return value.toISOString();
  }
  if (typeof value === "string") return value;
  throw new TypeError(`${what} must be a Date or RFC 3339 text, not ${kindOf(value)}`);
}

/**
 * The entries of `value`, an object of named options (`what`: "job options", "queue
 * settings"...), leaving out those set to `undefined` (as if not given). A `TypeError` when
 * `value` is not a plain object, or when it has keys not in `known` (a typo, a snake_case
 * name where camelCase is wanted): they are named, with the keys expected, so that a
 * misspelt option is an error rather than a default silently taken.
 */
export function knownEntries(value: unknown, what: string, known: readonly string[]): [string, unknown][] {
  if (value === null || typeof value !== "object" || Array.isArray(value) || !isPlainObject(value)) {
    throw new TypeError(`the ${what} must be a plain object, not ${kindOf(value)}`);
  }
  const entries = Object.entries(value).filter(([, item]) => item !== undefined);
  const unknown = entries.map(([key]) => key).filter((key) => !known.includes(key));
  if (unknown.length > 0) {
    const shown = unknown.slice(0, 8).map((key) => JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key));
    const more = unknown.length > 8 ? ` and ${unknown.length - 8} more` : "";
    throw new TypeError(`unknown ${what}: ${shown.join(", ")}${more} (expected some of ${known.join(", ")})`);
  }
  return entries;
}

/** A duration in seconds as the protocol's milliseconds: a finite number of seconds from 0
 * to ten years (315,360,000 s, the server's bound). A `TypeError` (not a number) or a
 * `RangeError` naming `what` otherwise. */
export function secondsMs(seconds: unknown, what: string): number {
  if (typeof seconds !== "number") throw new TypeError(`${what} must be a number of seconds, not ${kindOf(seconds)}`);
  if (!Number.isFinite(seconds)) throw new RangeError(`${what} must be a finite number of seconds, got ${String(seconds)}`);
  const ms = Math.round(seconds * 1000) + 0; // + 0: no -0 on the wire
  if (ms < 0 || ms > MAX_DURATION_MS) {
    throw new RangeError(`${what} must be from 0 to ${(MAX_DURATION_MS / 1000).toLocaleString("en")} s (ten years), got ${String(seconds)} s`);
  }
  return ms;
}
