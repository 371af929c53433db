/**
 * Node client and worker for hopper's network server (`hopper serve`), written from
 * `docs/protocol.md` of the hopper repository.
 *
 * ```ts
 * import { Client, Worker } from "hopper-client";
 *
 * const client = await Client.connect("tcp://127.0.0.1:7010", { token: "…" });
 * const id = await client.submit("send_email", { to: "ada@example.com" });
 *
 * const worker = new Worker("tcp://127.0.0.1:7010", { token: "…", concurrency: 8 });
 * worker.handle("send_email", async (job) => { … });
 * await worker.run(); // until worker.stop(), SIGINT or SIGTERM
 * ```
 */

export { Client, jobSpec, MAX_BATCH_JOBS } from "./client.js";
export type { Args, AttemptLog, JobFilter, JobOptions, JobRecord, JobSpec, LogLine, NodePage, NodePageRequest, QueueUpdate } from "./client.js";
export { PROTOCOL_VERSION } from "./connection.js";
export type { ConnectionOptions, Logger, Message } from "./connection.js";
export { HopperError, Unavailable } from "./errors.js";
export { uuid7, Uuid7Generator } from "./uuid7.js";
export { Job, Permanent, Snooze, Worker } from "./worker.js";
export type { Handler, WorkerOptions } from "./worker.js";
