/**
 * A worker (docs/protocol.md §6): receives orders, runs handlers (at most `concurrency` at
 * once), reports outcomes, heartbeats its leases, and reconnects when the server goes away.
 */

import {
  Connection,
  type ConnectionOptions,
  type Logger,
  type Message,
  defaultName,
} from "./connection.js";
import { HopperError, Unavailable } from "./errors.js";
import { LogSender } from "./log_sender.js";
import * as tracing from "./tracing.js";
import { integer, kindOf, loggable, safeString, secondsMs, string, wellFormed } from "./values.js";

/** Throw from a handler to run the job again after `seconds` without using an attempt.
 * `seconds` is a finite number from 0 to ten years (315,360,000 s, the server's bound):
 * anything else throws a `RangeError` (a `TypeError` for what is not a number) here, where
 * the `Snooze` is made. */
export class Snooze extends Error {
  constructor(readonly seconds: number) {
    secondsMs(seconds, "Snooze seconds");
    super(`snoozed for ${seconds} s`);
    this.name = "Snooze";
  }
}

/** Throw from a handler to fail the job for good (no retry): it is dead-lettered. */
export class Permanent extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Permanent";
  }
}

/** Runs one job: resolve to complete it, throw `Snooze`, `Permanent` or any error. */
export type Handler = (job: Job) => unknown;

/** One order: the job and the lease (`id`, `attempt`) it is reported with. */
export class Job {
  readonly id: string;
  readonly attempt: number;
  readonly queue: string | undefined;
  readonly kind: string;
  readonly args: unknown;
  readonly priority: number | undefined;
  /** 1 on the first counted try. */
  readonly countedAttempt: number | undefined;
  readonly maxAttempts: number | undefined;
  readonly timeoutMs: number | undefined;
  /** The job's metadata (`{}` when it has none); `meta.traceparent` is the W3C trace
   * context of the span that submitted it, when there was one. */
  readonly meta: Record<string, unknown>;
  /** Aborted when the job is cancelled, runs past its timeout or loses its lease: stop
   * then; the outcome is not reported. */
  readonly signal: AbortSignal;
  /** @internal */
  readonly controller = new AbortController();

  /** @internal */
  constructor(
    order: Message & { id: string; attempt: number },
    private readonly worker: Worker,
  ) {
    this.id = order.id;
    this.attempt = order.attempt;
    this.queue = optional(order["queue"], "string");
    this.kind = optional(order["kind"], "string") ?? "";
    this.args = order["args"];
    this.priority = optional(order["priority"], "number");
    this.countedAttempt = optional(order["counted_attempt"], "number");
    this.maxAttempts = optional(order["max_attempts"], "number");
    this.timeoutMs = optional(order["timeout_ms"], "number");
    const meta = order["meta"];
    this.meta =
      typeof meta === "object" && meta !== null && !Array.isArray(meta) ? { ...(meta as Record<string, unknown>) } : {};
    this.signal = this.controller.signal;
  }

  /** Asks the server to move this job's lease to `seconds` from now (for a job longer than
   * the lease; heartbeats already renew it while the worker lives). `seconds` is a finite
   * number from 0 to ten years, as for `Snooze`: anything else throws a `RangeError` (a
   * `TypeError` for what is not a number) and nothing is sent. */
  extend(seconds: number): void {
    const byMs = secondsMs(seconds, "extend seconds");
    this.worker.send({ type: "extend", id: this.id, attempt: this.attempt, by_ms: byMs });
  }

  private logLines: Message[] = [];
  /** Every line kept, sent or not: the attempt's bound. */
  private logBytes = 0;
  /** The lines not sent yet. */
  private logPending = 0;
  private logDropped = 0;
  /** After the first drop every line is dropped, so the log is its first lines. */
  private logFull = false;
  private logTimer: NodeJS.Timeout | null = null;

  /** Writes a line to this attempt's log, kept with the job (`hopper jobs show`, the HTTP
   * API, the dashboard). `level` is trace, debug, info, warn or error, in any case;
   * `warning` is warn, `critical` and `fatal` are error. Any other level throws a
   * `RangeError` naming it (a `TypeError` if it is not a string): a programming error,
   * which the server would refuse with every line sent alongside. `fields` are structured
   * details, made JSON-compatible when the line is written (a copy: later changes of the
   * caller's objects do not reach it): a value JSON cannot hold (NaN, a bigint, `undefined`,
   * a symbol, an Error) is written as its `String()`, a Date as its ISO text, a function as
   * `[Function: name]`, a cycle as `"[Circular]"`. Otherwise never throws (whatever the
   * message or the fields hold) nor waits: lines are sent while the job runs, a second
   * after the first of them was written (or once 16 KiB of them wait), and the rest just
   * before the outcome. An attempt keeps at most 64 KiB of lines; the rest are counted as
   * dropped. Lines the server cannot store now (the database away) are sent again for
   * about 5 s, in order; stored at least once: a line may be stored twice if an
   * acknowledgement is lost. */
  log(level: string, message: string, fields?: Record<string, unknown>): void {
    // Well-formed again after the cut, which may part a surrogate pair.
    const line: Message = { level: logLevel(level), message: wellFormed(safeString(message).slice(0, MAX_MESSAGE)), at: new Date().toISOString() };
    if (fields !== undefined && fields !== null) {
      // A copy, of JSON types only: the line cannot fail to encode when it is sent, nor
      // change meanwhile. The protocol's `fields` is a map: anything else goes under `value`.
      const copy = loggable(fields);
      const map = typeof copy === "object" && copy !== null && !Array.isArray(copy) ? (copy as Record<string, unknown>) : { value: copy };
      if (Object.keys(map).length > 0) line["fields"] = map;
    }
    let size: number;
    try {
      size = JSON.stringify(line).length;
    } catch {
      // cannot happen (loggable); never throw for a line
      delete line["fields"];
      size = JSON.stringify(line).length;
    }
    if (this.logFull || this.logBytes + size > MAX_LOG_BYTES) {
      // Only counted: the count goes with the next send (the last at the latest), so
      // logging past the bound sends nothing a second.
      this.logFull = true;
      this.logDropped += 1;
      return;
    }
    this.logBytes += size;
    this.logPending += size;
    this.logLines.push(line);
    if (this.logPending >= LOG_FLUSH_BYTES) {
      if (this.logTimer !== null) clearTimeout(this.logTimer);
      this.logTimer = setTimeout(() => this.sendLog(), 0);
    } else if (this.logTimer === null) {
      this.logTimer = setTimeout(() => this.sendLog(), LOG_FLUSH_MS);
    }
  }

  /** Sends the lines waiting while the job runs (not once it was aborted: a job another
   * worker may hold by now). */
  private sendLog(): void {
    this.logTimer = null;
    if (this.signal.aborted) return;
    this.worker.offerLog(this);
  }

  /** @internal The lines logged since the last take as one `log` message, or undefined
   * when none. The attempt's bound counts the lines taken before. */
  takeLog(): Message | undefined {
    if (this.logTimer !== null) {
      clearTimeout(this.logTimer);
      this.logTimer = null;
    }
    if (this.logLines.length === 0 && this.logDropped === 0) return undefined;
    const message: Message = { type: "log", id: this.id, attempt: this.attempt, lines: this.logLines, dropped: this.logDropped };
    this.logLines = [];
    this.logPending = 0;
    this.logDropped = 0;
    return message;
  }
}

/** The most log one attempt sends, as JSON; the server keeps the same bound. */
const MAX_LOG_BYTES = 64 * 1024;
/** The longest message of one log line, in characters (the server cuts at 4 KiB). */
const MAX_MESSAGE = 4096;
/** Lines are sent this long (ms) after the first of them was written, while the job runs,
 * so that a worker that dies mid-attempt loses at most this much of its log... */
const LOG_FLUSH_MS = 1000;
/** ...or at once when this many bytes of them wait. */
const LOG_FLUSH_BYTES = 16 * 1024;

/** The longest error text an outcome carries, in UTF-16 code units; the rest is cut (so
 * that the outcome always fits in a frame, and a job's history of errors stays small). */
const MAX_ERROR = 16 * 1024;

/** An outcome's error text: `prefix` and the error (`name: message` for an `Error` when
 * `named`, else its message or `String()`), never throwing, cut at 16 Ki characters. */
function errorText(error: unknown, prefix = "", named = true): string {
  let text: string;
  try {
    text = error instanceof Error ? (named ? `${String(error.name)}: ${String(error.message)}` : String(error.message)) : String(error);
  } catch {
    text = safeString(error); // a getter or a conversion that throws
  }
  // A lone surrogate is no UTF-8: the outcome would be refused as not CBOR, and the job
  // held until its lease ran out.
  text = wellFormed(prefix + text);
  if (text.length <= MAX_ERROR) return text;
  // Not between the two halves of a surrogate pair.
  const end = /[\uD800-\uDBFF]/.test(text.charAt(MAX_ERROR - 1)) ? MAX_ERROR - 1 : MAX_ERROR;
  return `${text.slice(0, end)}… (${text.length - end} more characters cut)`;
}

/** The log levels the server takes, by every name `Job.log` accepts (lowercased): the
 * server's own (`warning` is its alias of warn) and the common critical and fatal. */
const LEVELS: Record<string, string> = {
  trace: "trace",
  debug: "debug",
  info: "info",
  warn: "warn",
  warning: "warn",
  error: "error",
  critical: "error",
  fatal: "error",
};

/** The server's name of a log level (any case, as the server reads it; `warning` is warn,
 * `critical` and `fatal` are error), or a `RangeError` naming the level (`TypeError` if it
 * is not a string). */
export function logLevel(level: unknown): string {
  if (typeof level !== "string") {
    throw new TypeError(`a log level must be a string, not ${safeString(level)} (${typeof level})`);
  }
  // ASCII only, as the server lowercases: "İnfo" is no level.
  const lower = level.replace(/[A-Z]/g, (c) => c.toLowerCase());
  const name = Object.hasOwn(LEVELS, lower) ? LEVELS[lower] : undefined;
  if (name === undefined) {
    const shown = level.length > 64 ? `${level.slice(0, 64)}…` : level;
    throw new RangeError(`unknown log level ${JSON.stringify(shown)}: expected trace, debug, info, warn (warning) or error (critical, fatal)`);
  }
  return name;
}

function optional<T extends "string" | "number">(
  value: unknown,
  type: T,
): (T extends "string" ? string : number) | undefined {
  return typeof value === type ? (value as T extends "string" ? string : number) : undefined;
}

/** Options of a `Worker`, besides the connection's. */
export interface WorkerOptions extends ConnectionOptions {
  /** The queues served: an array of names (not one string). Default `["default"]`. */
  queues?: string[];
  /** Jobs run at once (the server never sends more, besides `prefetch`): an integer from 0
   * (no orders at all) to 10,000. Default 1. */
  concurrency?: number;
  /** Orders held beyond `concurrency`, started as slots free: 0 to 10,000. Default 0. */
  prefetch?: number;
  /** How long `stop()` waits for running jobs. Default 30,000 ms. */
  shutdownTimeoutMs?: number;
  /** An outcome not acknowledged in this long is sent again; a `bye` not acknowledged in
   * this long is given up on, when stopping. Default 10,000 ms. */
  ackTimeoutMs?: number;
  /** Stop gracefully on SIGINT and SIGTERM while `run()` runs. Default true. */
  stopOnSignals?: boolean;
  /** Where warnings go. Default `console`. */
  logger?: Logger;
}

/** The most a worker's `concurrency` or `prefetch` may be (docs/protocol.md §4, `hello`). */
const MAX_CREDIT = 10_000;

/** The queue names of `WorkerOptions.queues`, copied: a `TypeError` for one string (whose
 * letters would otherwise be served as queues) or anything but an array of strings. */
function queueNames(queues: unknown): string[] {
  if (typeof queues === "string") {
    throw new TypeError(`queues must be an array of queue names, not a string: [${JSON.stringify(queues)}]`);
  }
  if (!Array.isArray(queues)) throw new TypeError(`queues must be an array of queue names, not ${kindOf(queues)}`);
  return queues.map((queue, i) => string(queue, `queues[${i}]`));
}

/** A duration option in milliseconds: a finite number, not negative; a `TypeError` (not a
 * number) or `RangeError` naming `what` otherwise (NaN would make every timer fire at once). */
function milliseconds(value: unknown, what: string): number {
  if (typeof value !== "number") throw new TypeError(`${what} must be a number of milliseconds, not ${kindOf(value)}`);
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${what} must be a finite number of milliseconds, at least 0, got ${String(value)}`);
  return value;
}

interface Unacked {
  sentAt: number;
  message: Message;
}

/**
 * Runs handlers for the kinds registered with `handle`. `run()` resolves once the worker
 * stopped: after `stop()` (or SIGINT/SIGTERM), running jobs finish (within
 * `shutdownTimeoutMs`) and are reported, held orders go back (`released`).
 */
export class Worker {
  readonly name: string;
  private readonly handlers = new Map<string, Handler>();
  private readonly queues: string[];
  private readonly concurrency: number;
  private readonly prefetch: number;
  private readonly shutdownTimeoutMs: number;
  private readonly ackTimeoutMs: number;
  private readonly logger: Logger;
  private conn: Connection | null = null;
  private readonly running = new Map<string, Job>();
  private held: Job[] = [];
  private readonly unacked = new Map<number, Unacked>();
  private readonly logs: LogSender;
  private stopping = false;
  private leaveBy = Infinity;
  /** The `req` of the bye of this session not acknowledged yet (null: none waits). */
  private byeReq: number | null = null;
  /** When the worker stops waiting for that acknowledgement (`Date.now()` ms). */
  private byeBy = Infinity;
  private byeTimer: NodeJS.Timeout | null = null;
  private reconnecting = false;
  private timer: NodeJS.Timeout | null = null;
  private finished: (() => void) | null = null;

  /** Throws a `TypeError` (a `RangeError` for a number out of range) when an option is not
   * what it must be: `queues` given as one string (`"mail"` for `["mail"]`) or holding
   * something else than strings, `concurrency` or `prefetch` not an integer from 0 to
   * 10,000, a timeout not a finite number of milliseconds, `name` not a string. */
  constructor(
    readonly endpoint: string,
    private readonly options: WorkerOptions = {},
  ) {
    this.name = options.name === undefined ? defaultName() : string(options.name, "name");
    this.queues = queueNames(options.queues ?? ["default"]);
    this.concurrency = integer(options.concurrency ?? 1, "concurrency", 0, MAX_CREDIT);
    this.prefetch = integer(options.prefetch ?? 0, "prefetch", 0, MAX_CREDIT);
    this.shutdownTimeoutMs = milliseconds(options.shutdownTimeoutMs ?? 30_000, "shutdownTimeoutMs");
    this.ackTimeoutMs = milliseconds(options.ackTimeoutMs ?? 10_000, "ackTimeoutMs");
    this.logger = options.logger ?? console;
    this.logs = new LogSender(
      (message) => this.sendTracked(message),
      this.ackTimeoutMs,
      (text) => this.logger.warn(`hopper worker ${this.name}: ${text}`),
      () => this.finishIfDone(),
    );
  }

  /** Registers `handler` for `kind`; returns the worker, for chaining. A `TypeError` when
   * `kind` is not a string or `handler` not a function. */
  handle(kind: string, handler: Handler): this {
    string(kind, "kind");
    if (typeof handler !== "function") throw new TypeError(`the handler of ${JSON.stringify(kind)} must be a function, not ${kindOf(handler)}`);
    this.handlers.set(kind, handler);
    return this;
  }

  /** Connects and serves until `stop()`; resolves once every held job is reported. */
  async run(): Promise<void> {
    await tracing.load();
    const hello: Message = {
      role: "worker",
      name: this.name,
      queues: this.queues,
      concurrency: this.concurrency,
      kinds: [...this.handlers.keys()].sort(),
    };
    if (this.prefetch > 0) hello["prefetch"] = this.prefetch;
    const conn = new Connection(this.endpoint, hello, this.options, (m) => this.onMessage(m));
    this.conn = conn;
    const stop = (): void => this.stop();
    const signals = this.options.stopOnSignals ?? true;
    if (signals) {
      process.on("SIGINT", stop);
      process.on("SIGTERM", stop);
    }
    try {
      const done = new Promise<void>((resolve) => {
        this.finished = resolve;
      });
      await conn.reconnect();
      this.connected();
      this.tick();
      await done;
    } finally {
      if (this.timer !== null) clearTimeout(this.timer);
      if (this.byeTimer !== null) clearTimeout(this.byeTimer);
      this.logs.close();
      if (signals) {
        process.off("SIGINT", stop);
        process.off("SIGTERM", stop);
      }
      conn.close();
    }
  }

  /** Asks `run()` to leave gracefully: the worker says bye (no more orders); running jobs
   * finish and are reported, and `run()` resolves once the outcomes and the bye are
   * acknowledged (the bye waited for at most `ackTimeoutMs`). Called before `run()` has
   * connected, the worker says hello and bye at once. */
  stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.leaveBy = Date.now() + this.shutdownTimeoutMs;
    // Before the hello, the bye goes once the connection is made (`connected`).
    if (this.conn === null) return;
    this.sayBye();
    // Held orders never started go back untouched: available at once, no attempt used.
    const held = this.held;
    this.held = [];
    for (const job of held) {
      this.sendOutcome({ type: "released", id: job.id, attempt: job.attempt });
    }
    this.finishIfDone();
  }

  /** @internal Sends a message with a fresh `req`; failures are logged (the server
   * learns what it missed from the next heartbeat, outcomes go again). A message that can
   * never be sent (it cannot be encoded, or is too large) is dropped: an outcome is then
   * no longer kept to be sent again nor listed in heartbeats, so that the server runs the
   * job again once its lease runs out rather than holding it for ever. */
  send(message: Message): number {
    const conn = this.conn;
    if (conn === null) return 0;
    const req = conn.nextReq();
    conn.send({ ...message, req }).catch((e: unknown) => {
      if (e instanceof Unavailable) {
        this.logger.warn(`hopper worker ${this.name}: cannot send ${String(message["type"])}: ${String(e)}`);
        return;
      }
      this.logger.warn(`hopper worker ${this.name}: dropped a ${String(message["type"])} message that cannot be sent: ${String(e)}`);
      if (this.unacked.delete(req)) this.finishIfDone();
    });
    return req;
  }

  /** A send whose failure the caller handles: its `req` and whether it left; undefined
   * without a connection. */
  private sendTracked(message: Message): { req: number; sent: Promise<void> } | undefined {
    const conn = this.conn;
    if (conn === null) return undefined;
    const req = conn.nextReq();
    return { req, sent: conn.send({ ...message, req }) };
  }

  /** @internal Sends the job's waiting lines as a `log` request, after the one of its
   * attempt in flight if any (`last`: the attempt ended). */
  offerLog(job: Job, last = false): void {
    this.logs.offer(`${job.id}/${job.attempt}`, () => job.takeLog(), last);
  }

  private sendOutcome(message: Message): void {
    const req = this.send(message);
    this.unacked.set(req, { sentAt: Date.now(), message });
  }

  /** Says bye in this session and waits for its acknowledgement (at most `ackTimeoutMs`):
   * a bye closed away unread (the socket does not linger) would leave the server to take
   * the close for a vanished worker's, and count the attempts of the orders it sent
   * meanwhile. Orders sent before the bye arrive before its acknowledgement, and are
   * handed back. */
  private sayBye(): void {
    this.byeReq = this.send({ type: "bye" });
    this.byeBy = Date.now() + this.ackTimeoutMs;
    if (this.byeTimer !== null) clearTimeout(this.byeTimer);
    this.byeTimer = setTimeout(() => {
      this.byeTimer = null;
      if (this.byeReq !== null) {
        this.logger.warn(`hopper worker ${this.name}: the server did not acknowledge the bye within ${this.ackTimeoutMs} ms`);
      }
      this.finishIfDone();
    }, this.ackTimeoutMs);
  }

  private finishIfDone(): void {
    const byeWaits = this.byeReq !== null && Date.now() < this.byeBy;
    const done = this.running.size === 0 && this.unacked.size === 0 && !this.logs.pending() && !byeWaits;
    if (this.stopping && (done || Date.now() > this.leaveBy) && this.finished !== null) {
      this.finished();
      this.finished = null;
    }
  }

  /** Once per heartbeat period: heartbeat, silence check, outcomes to send again. */
  private tick(): void {
    const conn = this.conn;
    if (conn === null) return;
    const now = Date.now();
    this.finishIfDone();
    if (this.reconnecting) {
      // a new socket is saying hello: heartbeats wait for it
    } else if (now - conn.lastHeard > 3 * conn.heartbeatMs) {
      this.logger.warn(`hopper worker ${this.name}: server silent; reconnecting`);
      void this.reconnect();
    } else {
      const leases = [...this.running.values(), ...this.held].map((j) => ({ id: j.id, attempt: j.attempt }));
      for (const { message } of this.unacked.values()) {
        leases.push({ id: message["id"] as string, attempt: message["attempt"] as number });
      }
      this.send({ type: "heartbeat", leases });
      for (const [req, { sentAt, message }] of this.unacked) {
        if (now - sentAt > this.ackTimeoutMs) {
          this.unacked.delete(req);
          this.sendOutcome(message);
        }
      }
    }
    this.timer = setTimeout(() => this.tick(), conn.heartbeatMs);
  }

  /** A hello was answered (a new session): a worker stopping says bye in it too. Without
   * it, the server would send the session orders until the worker closed, then take the
   * close for a vanished worker's and count those orders' attempts. */
  private connected(): void {
    if (this.stopping) this.sayBye();
  }

  private async reconnect(): Promise<void> {
    const conn = this.conn;
    if (conn === null || this.reconnecting) return;
    this.reconnecting = true;
    try {
      await conn.reconnect(Date.now() + 2 * conn.heartbeatMs);
      this.connected();
      // Outcomes not yet acknowledged go again (a repeat is answered lease_lost), and so do
      // log requests: the old socket's replies never come.
      const pending = [...this.unacked.values()].map((u) => u.message);
      this.unacked.clear();
      for (const message of pending) this.sendOutcome(message);
      this.logs.resend();
    } catch (e) {
      this.logger.warn(`hopper worker ${this.name}: reconnecting failed: ${String(e)}`);
    } finally {
      this.reconnecting = false;
    }
  }

  private onMessage(message: Message): void {
    switch (message["type"]) {
      case "order":
        this.accept(message["job"]);
        break;
      case "cancel":
        this.abort(String(message["id"]), undefined);
        break;
      case "heartbeat_ack":
        for (const lease of Array.isArray(message["lost"]) ? message["lost"] : []) {
          if (lease !== null && typeof lease === "object") {
            const { id, attempt } = lease as Message;
            this.abort(String(id), typeof attempt === "number" ? attempt : undefined);
          }
        }
        break;
      case "ack": {
        if (this.logs.onReply(message)) break;
        const req = message["req"];
        if (req === this.byeReq) this.byeReq = null;
        if (typeof req === "number") this.unacked.delete(req);
        this.finishIfDone();
        break;
      }
      case "error": {
        const code = String(message["code"]);
        const req = message["req"];
        const outcome = typeof req === "number" ? this.unacked.get(req) : undefined;
        if (code === "unauthorized") {
          void this.reconnect(); // the server restarted and forgot this session
        }
        if (this.logs.onReply(message) || code === "unauthorized") {
          // a log request's answer, or a hello to say again (and the bye with it)
        } else if (req === this.byeReq) {
          this.byeReq = null;
          this.logger.warn(`hopper worker ${this.name}: bye refused: ${String(message["message"])}`);
          this.finishIfDone();
        } else if (outcome !== undefined && code !== "internal" && typeof req === "number") {
          this.unacked.delete(req);
          this.logger.warn(`hopper worker ${this.name}: outcome of ${String(outcome.message["id"])} refused: ${String(message["message"])}`);
          this.finishIfDone();
        } else {
          this.logger.warn(`hopper worker ${this.name}: server error ${code}: ${String(message["message"])}`);
        }
        break;
      }
      default:
        break;
    }
  }

  private accept(order: unknown): void {
    if (
      order === null ||
      typeof order !== "object" ||
      typeof (order as Message)["id"] !== "string" ||
      typeof (order as Message)["attempt"] !== "number"
    ) {
      this.logger.warn(`hopper worker ${this.name}: skipped an order without a lease (id, attempt)`);
      return;
    }
    const job = new Job(order as Message & { id: string; attempt: number }, this);
    if (this.stopping) {
      this.sendOutcome({ type: "released", id: job.id, attempt: job.attempt });
    } else if (this.running.size < this.concurrency) {
      this.start(job);
    } else {
      this.held.push(job);
    }
  }

  /** Stops a job (cancelled, timed out or its lease lost): it is not reported. */
  private abort(id: string, attempt: number | undefined): void {
    const job = this.running.get(id) ?? this.held.find((j) => j.id === id);
    if (job === undefined || (attempt !== undefined && job.attempt !== attempt)) return;
    this.held = this.held.filter((j) => j !== job);
    job.controller.abort(new HopperError("cancelled", `job ${id} was cancelled or lost its lease`));
  }

  private start(job: Job): void {
    this.running.set(job.id, job);
    const started = performance.now();
    const handler = this.handlers.get(job.kind);
    const run = async (): Promise<Message> => {
      if (handler === undefined) throw new Permanent(`no handler for kind ${job.kind} on worker ${this.name}`);
      await handler(job);
      return { type: "completed" };
    };
    const settled = (): Promise<Message> =>
      run()
        .catch((e: unknown): Message => {
          if (e instanceof Snooze) {
            // Checked again: a Snooze whose seconds were changed after it was made (or a
            // subclass that skipped the check) fails the attempt, counted so that it cannot
            // loop, rather than sending a delay the server refuses.
            try {
              return { type: "snoozed", delay_ms: secondsMs((e as { seconds: unknown }).seconds, "Snooze seconds") };
            } catch (invalid) {
              return { type: "failed", error: errorText(invalid, "invalid Snooze: ", false), retryable: true };
            }
          }
          if (e instanceof Permanent) return { type: "failed", error: errorText(e, "", false), retryable: false };
          return { type: "failed", error: errorText(e), retryable: true };
        })
        .then((outcome) => {
          if (outcome["type"] !== "snoozed") {
            outcome["duration_ms"] = Math.round(performance.now() - started);
          }
          return outcome;
        });
    tracing
      .inJobSpan(job, settled)
      .catch((e: unknown): Message => ({
        // Whatever escaped (a failing tracer): the attempt still gets an outcome, so that
        // the job is never left held and heartbeated until its timeout.
        type: "failed",
        error: errorText(e, "the worker failed while running the handler: "),
        retryable: true,
        duration_ms: Math.round(performance.now() - started),
      }))
      .then((outcome) => {
        this.running.delete(job.id);
        if (!job.signal.aborted) {
          // The attempt's log goes out just before its outcome (after the request of it in
          // flight, if any).
          this.offerLog(job, true);
          this.sendOutcome({ ...outcome, id: job.id, attempt: job.attempt });
        }
        const next = this.held.shift();
        if (next !== undefined) this.start(next);
        this.finishIfDone();
      });
  }
}
