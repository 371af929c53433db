/** Submitting, inspecting and cancelling jobs (docs/protocol.md §5). */

import { Connection, type ConnectionOptions, type Message } from "./connection.js";
import { HopperError, Unavailable } from "./errors.js";
import { uuid7 } from "./uuid7.js";
import { MAX_DURATION_MS, integer, jsonValue, kindOf, knownEntries, rfc3339, string } from "./values.js";

/** A job's arguments: a JSON-compatible map or array (no `Date`, no `Uint8Array`). */
export type Args = Record<string, unknown> | unknown[];

/** Options of one job; every one may be left out (or be `undefined`). */
export interface JobOptions {
  queue?: string | undefined;
  /** Lower runs first: an integer (−32768…32767) or "high" (1), "normal" (2), "low" (3). */
  priority?: number | "high" | "normal" | "low" | undefined;
  /** Not before this instant. */
  runAt?: Date | string | undefined;
  /** Not before this long from now (server clock); not with `runAt`. */
  delayMs?: number | undefined;
  /** Failed attempts before the job is dead-lettered. Default 25. */
  maxAttempts?: number | undefined;
  /** How long one run may take. Default 1,800,000. */
  timeoutMs?: number | undefined;
  /** Metadata: a map of at most 16 KiB as JSON; `traceparent` there is the job's W3C trace
   * context. */
  meta?: Record<string, unknown> | undefined;
}

/** One job of a batch: its kind, its arguments and its options. */
export interface JobSpec extends JobOptions {
  kind: string;
  args?: Args;
}

/** One line of an attempt's log. */
export interface LogLine {
  /** When it was written (RFC 3339, UTC). */
  at: string;
  /** `trace`, `debug`, `info`, `warn` or `error`. */
  level: string;
  message: string;
  /** Structured details, when the line has some. */
  fields?: Record<string, unknown>;
}

/** The log of one attempt of a job (`Client.jobLogs`). */
export interface AttemptLog {
  /** The attempt (the lease's attempt number). */
  attempt: number;
  /** The lines kept, oldest first (at most 64 KiB of them as JSON). */
  lines: LogLine[];
  /** Lines written past the attempt's bound and not kept. */
  dropped: number;
}

/** A job as the server describes it (the protocol's `job` map, snake_case as on the wire). */
export interface JobRecord {
  id: string;
  queue: string;
  kind: string;
  args: unknown;
  priority: number;
  state: "scheduled" | "available" | "running" | "completed" | "failed" | "cancelled";
  run_at: string;
  attempt: number;
  attempts_used: number;
  max_attempts: number;
  timeout_ms: number;
  created_at: string;
  attempted_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
  errors: { attempt: number; at: string; error: string; duration_ms: number | null }[];
  /** Its metadata (`{}` when it has none); `null` in a listing that left it out. */
  meta?: Record<string, unknown> | null;
  /** In a listing: the size of `args` as JSON text, in bytes, when it was larger than
   * 4 KiB and so left out (`args` is `null`); `status` reads the job whole. */
  args_bytes?: number;
  /** In a listing: the size of `meta` as JSON text, in bytes, when it was larger than
   * 4 KiB and so left out (`meta` is `null`). */
  meta_bytes?: number;
  [key: string]: unknown;
}

/** Filters of `listJobs` (the protocol's `filter` map); `undefined` ones are left out. */
export interface JobFilter {
  queue?: string | undefined;
  state?: JobRecord["state"] | undefined;
  kind?: string | undefined;
  /** Only this group (tenant). */
  group?: string | undefined;
  /** Only jobs whose metadata holds each of this object's keys with its value. */
  meta?: Record<string, unknown> | undefined;
  /** An id: only older jobs (the next page). */
  before?: string | undefined;
  /** Only jobs created after this instant: a `Date`, or RFC 3339 text. */
  createdAfter?: Date | string | undefined;
  /** Only jobs created before this instant: a `Date`, or RFC 3339 text. */
  createdBefore?: Date | string | undefined;
  /** 1 to 1,000; default 20. */
  limit?: number | undefined;
}

/** Which page of the registered nodes `nodes` reads (the protocol's `before` and `limit`,
 * as `listJobs` takes them); `undefined` ones are left out. */
export interface NodePageRequest {
  /** The previous page's `next_before`: the page after it. */
  before?: string | undefined;
  /** 1 to 1,000; default 20. */
  limit?: number | undefined;
}

/** One page of the registered nodes, by name (byte by byte), then id. */
export interface NodePage {
  /** Each with `id`, `name`, `queues`, `concurrency`, `started_at`, `heartbeat_at`. */
  nodes: Record<string, unknown>[];
  /** The `before` of the next page; `null` on the last page. */
  next_before: string | null;
}

/** A change of a queue's settings: `null` removes a limit, a setting left out (or
 * `undefined`) stays as it is. Names as on the wire (docs/protocol.md, "Admin requests"). */
export interface QueueUpdate {
  paused?: boolean | undefined;
  max_running?: number | null | undefined;
  max_running_per_group?: number | null | undefined;
  rate?: { jobs: number; per_ms: number; burst?: number } | null | undefined;
}

const MAX_INT32 = 2_147_483_647;
/** The most jobs one `submitBatch` holds (the server refuses more). */
export const MAX_BATCH_JOBS = 10_000;
/** The options of one job, as `submit` takes them. */
const JOB_OPTIONS = ["queue", "priority", "runAt", "delayMs", "maxAttempts", "timeoutMs", "meta"] as const;
/** The fields of one job of `submitBatch`. */
const JOB_FIELDS = ["kind", "args", ...JOB_OPTIONS] as const;
/** The filters of `listJobs`, and their names on the wire. */
const JOB_FILTERS: Record<string, string> = {
  queue: "queue",
  state: "state",
  kind: "kind",
  group: "group",
  meta: "meta",
  before: "before",
  createdAfter: "created_after",
  createdBefore: "created_before",
  limit: "limit",
};
/** The settings `updateQueue` changes (docs/protocol.md, "Admin requests"). */
const QUEUE_SETTINGS = ["paused", "max_running", "max_running_per_group", "rate"] as const;

/** The wire map of one job, with a fresh UUIDv7 id (so a retried submit cannot insert twice).
 * What the protocol cannot carry is refused here, before anything is sent: `args` and `meta`
 * must be JSON-compatible (a `TypeError` or `RangeError` naming the path of the first bad
 * value under `what`), the options have their types and ranges checked (docs/protocol.md §2
 * and §3), and a field that is not one of `JobSpec` (`delay_ms` for `delayMs`, say) is a
 * `TypeError`. */
export function jobSpec(spec: JobSpec, what = ""): Message {
  const name = (field: string): string => (what === "" ? field : `${what}.${field}`);
  knownEntries(spec, what === "" ? "job fields" : `job fields of ${what}`, JOB_FIELDS);
  const wire: Message = { id: uuid7(), kind: string(spec.kind, name("kind")), args: spec.args === undefined ? {} : jsonValue(spec.args, name("args")) };
  if (spec.queue !== undefined) wire["queue"] = string(spec.queue, name("queue"));
  if (spec.priority !== undefined) {
    wire["priority"] =
      typeof spec.priority === "string" ? spec.priority : integer(spec.priority, `${name("priority")} (an integer or "high", "normal", "low")`, -32768, 32767);
  }
  if (spec.runAt !== undefined) wire["run_at"] = rfc3339(spec.runAt, name("runAt"));
  if (spec.delayMs !== undefined) wire["delay_ms"] = integer(spec.delayMs, name("delayMs"), 0, MAX_DURATION_MS);
  if (spec.maxAttempts !== undefined) wire["max_attempts"] = integer(spec.maxAttempts, name("maxAttempts"), 1, MAX_INT32);
  if (spec.timeoutMs !== undefined) wire["timeout_ms"] = integer(spec.timeoutMs, name("timeoutMs"), 1, MAX_INT32);
  if (spec.meta !== undefined) wire["meta"] = jsonValue(spec.meta, name("meta"));
  return wire;
}

/**
 * Submits and inspects jobs through a hopper server. Every call rejects with `HopperError`
 * (with `.code`) when the server refuses it and with `Unavailable` when no reply comes
 * within `timeoutMs`. One `Client` holds one socket; calls may overlap.
 */
export class Client {
  private constructor(private readonly conn: Connection) {}

  /** Connects and says hello (rejects with `HopperError` "unauthorized" for a wrong token). */
  static async connect(endpoint: string, options: ConnectionOptions = {}): Promise<Client> {
    const hello: Message = { role: "client" };
    if (options.name !== undefined) hello["name"] = options.name;
    const conn = new Connection(endpoint, hello, options);
    await conn.reconnect(Date.now() + conn.timeoutMs);
    return new Client(conn);
  }

  /** Closes the connection. */
  close(): void {
    this.conn.close();
  }

  private async call(type: string, fields: Message): Promise<Message> {
    try {
      return await this.conn.request(type, fields);
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
      // The server may have restarted: a new socket and hello, then one more try.
      await this.conn.reconnect(Date.now() + this.conn.timeoutMs);
      return await this.conn.request(type, fields);
    }
  }

  /** Submits one job; resolves with its id. Rejects with a `TypeError` or `RangeError`,
   * before anything is sent, when `args`, `meta` or an option is not what the protocol
   * carries, or an option is unknown (see `jobSpec`). */
  async submit(kind: string, args?: Args, options: JobOptions = {}): Promise<string> {
    knownEntries(options, "job options", JOB_OPTIONS);
    const spec = jobSpec(args === undefined ? { ...options, kind } : { ...options, kind, args });
    try {
      const reply = await this.call("submit", { job: spec });
      return (reply["ids"] as string[])[0] ?? String(spec["id"]);
    } catch (e) {
      // `conflict` for our own id: an earlier try of this submit went through.
      if (e instanceof HopperError && e.code === "conflict") return String(spec["id"]);
      throw e;
    }
  }

  /** Submits many jobs in one transaction (all or none); resolves with their ids, in order.
   * Jobs of one priority run in that order. A job the protocol cannot carry rejects the
   * batch before anything is sent, naming it (`jobs[3].args.when`); so do more than
   * `MAX_BATCH_JOBS` (10,000, the server's bound: submit larger ones in several batches),
   * with a `RangeError`. */
  async submitBatch(jobs: JobSpec[]): Promise<string[]> {
    if (!Array.isArray(jobs)) throw new TypeError(`jobs must be an array of jobs, not ${kindOf(jobs)}`);
    if (jobs.length > MAX_BATCH_JOBS) {
      throw new RangeError(`a batch holds at most ${MAX_BATCH_JOBS.toLocaleString("en")} jobs, got ${jobs.length.toLocaleString("en")}: submit larger ones in several batches`);
    }
    const reply = await this.call("submit_batch", { jobs: jobs.map((job, i) => jobSpec(job, `jobs[${i}]`)) });
    return reply["ids"] as string[];
  }

  /** The job (`not_found` if there is none). */
  async status(id: string): Promise<JobRecord> {
    return (await this.call("status", { id: string(id, "id") }))["job"] as JobRecord;
  }

  /** Each attempt's log of the job, oldest attempt first (`not_found` if there is no such
   * job). Reads the server's pages (`job_logs`, 8 attempts each) until the last. */
  async jobLogs(id: string): Promise<AttemptLog[]> {
    string(id, "id");
    const logs: AttemptLog[] = [];
    let after = 0;
    for (;;) {
      const reply = await this.call("job_logs", { id, after });
      logs.push(...(reply["logs"] as AttemptLog[]));
      const next = reply["next"];
      // A cursor that does not move on would loop for ever.
      if (typeof next !== "number" || next <= after) return logs;
      after = next;
    }
  }

  /** Cancels a job that has not finished; resolves with it (`conflict` if it finished). */
  async cancel(id: string): Promise<JobRecord> {
    return (await this.call("cancel", { id: string(id, "id") }))["job"] as JobRecord;
  }

  /** Jobs, newest first. Filters: `queue`, `state`, `kind`, `group`, `meta` (an object:
   * only jobs whose metadata holds each of its keys with its value), `before` (an id: the
   * next, older page), `createdAfter`, `createdBefore` (`Date`s or RFC 3339 text), `limit`
   * (1 to 1,000, default 20). Rejects before anything is sent with a `TypeError` for an
   * unknown filter or one of the wrong type, a `RangeError` for an invalid `Date` or a
   * `limit` out of range.
   *
   * A listed job's `args` or `meta` larger than 4 KiB is left out: it is `null` and
   * `args_bytes` / `meta_bytes` give its size (`status` reads the job whole). The server
   * cuts a reply that would pass its frame size and says where to go on (`next_before`);
   * this method goes on until `limit` jobs are there or none are left. */
  async listJobs(filter: JobFilter = {}): Promise<JobRecord[]> {
    const wire: Message = {};
    for (const [key, value] of knownEntries(filter, "job filters", Object.keys(JOB_FILTERS))) {
      const name = JOB_FILTERS[key] ?? key;
      if (key === "createdAfter" || key === "createdBefore") wire[name] = rfc3339(value, key);
      else if (key === "limit") wire[name] = integer(value, key, 1, 1000);
      else if (key === "meta") wire[name] = jsonValue(value, key);
      else wire[name] = string(value, key);
    }
    let left = (wire["limit"] as number | undefined) ?? 20;
    const jobs: JobRecord[] = [];
    for (;;) {
      const reply = await this.call("list_jobs", { filter: { ...wire, limit: left } });
      const page = reply["jobs"] as JobRecord[];
      jobs.push(...page);
      left -= page.length;
      const next = reply["next_before"];
      if (typeof next !== "string" || page.length === 0 || left <= 0) return jobs;
      wire["before"] = next;
    }
  }

  /** Puts a failed or cancelled job back to available; resolves with it. */
  async retry(id: string): Promise<JobRecord> {
    return (await this.call("retry", { id: string(id, "id") }))["job"] as JobRecord;
  }

  /** Deletes a job that is not running. */
  async delete(id: string): Promise<void> {
    await this.call("delete", { id: string(id, "id") });
  }

  /** Retries every failed job (of `queue` and/or `kind`); resolves with how many. */
  async retryFailed(filter: { queue?: string; kind?: string } = {}): Promise<number> {
    const wire: Message = {};
    for (const [key, value] of knownEntries(filter, "retryFailed filters", ["queue", "kind"])) wire[key] = string(value, key);
    return (await this.call("retry_failed", wire))["count"] as number;
  }

  /** Deletes every job that is not running (of `queue`); resolves with how many. */
  async clear(queue?: string): Promise<number> {
    return (await this.call("clear", queue === undefined ? {} : { queue: string(queue, "queue") }))["count"] as number;
  }

  /** Counts by queue and state. */
  async queueStats(): Promise<Record<string, unknown>[]> {
    return (await this.call("queue_stats", {}))["queues"] as Record<string, unknown>[];
  }

  /** Every queue that has settings (paused, limits). */
  async queues(): Promise<Record<string, unknown>[]> {
    return (await this.call("list_queues", {}))["queues"] as Record<string, unknown>[];
  }

  /** Changes a queue's settings: `paused`, `max_running`, `max_running_per_group`, `rate`
   * (`{ jobs, per_ms }`); `null` removes a limit. Resolves with the settings now stored.
   * Rejects before anything is sent with a `TypeError` for an unknown setting, a queue that
   * is not a string or a value that is not JSON (a `RangeError` for NaN, say); the ranges
   * are the server's to check. */
  async updateQueue(queue: string, update: QueueUpdate): Promise<Record<string, unknown>> {
    const settings = Object.fromEntries(knownEntries(update, "queue settings", QUEUE_SETTINGS));
    const wire = jsonValue(settings, "the queue settings") as Message;
    wire["queue"] = string(queue, "queue");
    const reply = await this.call("update_queue", { update: wire });
    return reply["queue"] as Record<string, unknown>;
  }

  /** The registered periodic jobs. */
  async cron(): Promise<Record<string, unknown>[]> {
    return (await this.call("list_cron", {}))["entries"] as Record<string, unknown>[];
  }

  /** One page of the registered nodes (runtimes and servers) by name, and the cursor of
   * the next: paged as `listJobs` is, `before` (the previous page's `next_before`) and
   * `limit` (1 to 1,000, default 20). Rejects before anything is sent with a `TypeError`
   * for an unknown field or one of the wrong type, a `RangeError` for a `limit` out of
   * range or a `before` UTF-8 cannot encode; a `before` that is not a cursor is the
   * server's `invalid`. */
  async nodes(page: NodePageRequest = {}): Promise<NodePage> {
    const wire: Message = {};
    for (const [key, value] of knownEntries(page, "node page fields", ["before", "limit"])) {
      wire[key] = key === "limit" ? integer(value, key, 1, 1000) : string(value, key);
    }
    const reply = await this.call("list_nodes", wire);
    // A server that predates paging answers every node, without a cursor.
    const next = reply["next_before"];
    return { nodes: reply["nodes"] as Record<string, unknown>[], next_before: typeof next === "string" ? next : null };
  }

  /** What finished in each minute of the last `minutes` (1 to 1440), oldest first
   * (`minute`, `completed`, `failed`, latencies and durations in milliseconds); minutes
   * in which nothing finished are left out. A `TypeError` (before anything is sent) when
   * `minutes` is not an integer number; its range is the server's to check. */
  async jobStats(minutes = 60): Promise<Record<string, unknown>[]> {
    // The range is the server's to check (its error says it); the type is checked here.
    const wire = integer(minutes, "minutes", -MAX_INT32 - 1, MAX_INT32);
    return (await this.call("job_stats", { minutes: wire }))["minutes"] as Record<string, unknown>[];
  }
}
