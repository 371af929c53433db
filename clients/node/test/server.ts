/** Fixtures: the real `hopper serve` binary against PostgreSQL, one schema per test. */

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, closeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(import.meta.url), "../../../../..");

export const DATABASE_URL =
  process.env["HOPPER_TEST_DATABASE_URL"] ??
  process.env["DATABASE_URL"] ??
  "postgres://postgres@127.0.0.1:5432/postgres";

/** The hopper binary: `HOPPER_BIN`, or target/debug/hopper of this checkout. */
export function hopperBin(): string {
  const path = process.env["HOPPER_BIN"] ?? join(ROOT, "target", "debug", "hopper");
  if (!existsSync(path)) {
    throw new Error(`the hopper binary is not at ${path}: run \`cargo build -p hopper-cli\` or set HOPPER_BIN`);
  }
  return path;
}

async function freePort(): Promise<number> {
  return await new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => (typeof address === "object" && address !== null ? done(address.port) : fail(new Error("no port"))));
    });
  });
}

/** Runs one SQL statement; its rows as text. */
export function psql(sql: string): string {
  return execFileSync("psql", [DATABASE_URL, "-XtAq", "-v", "ON_ERROR_STOP=1", "-c", sql], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
}

export const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/** Waits for `condition`, polling; throws after `timeoutMs`. */
export async function waitUntil(condition: () => boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (condition()) return;
    await sleep(20);
  }
  throw new Error(`${what} not met within ${timeoutMs} ms`);
}

/** The server's heartbeat period and lease, as `hopper serve` takes them. */
export interface Timing {
  heartbeat: string;
  lease: string;
}

/** One `hopper serve` process on a schema of its own; `kill()` and `start()` again for restarts. */
export class Server {
  readonly schema = `nodetest_${randomBytes(8).toString("hex")}`;
  readonly dir = mkdtempSync(join(tmpdir(), "hopper-node-"));
  readonly tokenFile = join(this.dir, "token");
  readonly log = join(this.dir, "server.log");
  endpoint = "";
  /** The CURVE public key the server printed on start (undefined in plaintext). */
  serverKey: string | undefined;
  private proc: ChildProcess | null = null;

  private constructor(
    private readonly extra: string[],
    private readonly timing: Timing,
  ) {}

  /** Starts a server (`extra`: more `hopper serve` arguments). */
  static async start(extra: string[] = [], timing: Timing = { heartbeat: "300ms", lease: "5s" }): Promise<Server> {
    const server = new Server(extra, timing);
    server.endpoint = `tcp://127.0.0.1:${await freePort()}`;
    await server.start();
    return server;
  }

  async start(): Promise<void> {
    const args = ["serve", "--listen", this.endpoint, "--heartbeat", this.timing.heartbeat, "--lease", this.timing.lease];
    if (!this.extra.includes("--insecure-no-auth")) args.push("--token-file", this.tokenFile);
    writeFileSync(this.log, "");
    const log = openSync(this.log, "a");
    this.proc = spawn(hopperBin(), [...args, ...this.extra], {
      env: { ...process.env, DATABASE_URL, HOPPER_SCHEMA: this.schema, HOPPER_LOG: process.env["HOPPER_LOG"] ?? "warn" },
      stdio: ["ignore", "ignore", log],
    });
    closeSync(log);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      const text = readFileSync(this.log, "utf8");
      if (text.includes(`listening on ${this.endpoint}`)) {
        this.serverKey = /peers need the server key (\S{40})/.exec(text)?.[1];
        return;
      }
      if (this.proc.exitCode !== null) throw new Error(`hopper serve exited: ${readFileSync(this.log, "utf8")}`);
      await sleep(50);
    }
    throw new Error(`hopper serve did not start: ${readFileSync(this.log, "utf8")}`);
  }

  /** The first token of the token file. */
  get token(): string {
    const line = readFileSync(this.tokenFile, "utf8")
      .split("\n")
      .find((l) => l.trim() !== "" && !l.startsWith("#"));
    if (line === undefined) throw new Error("no token in the token file");
    return line.trim();
  }

  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const proc = this.proc;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((done) => proc.once("exit", done));
    proc.kill(signal);
    await exited;
  }

  /** Stops the server and drops its schema. */
  async stop(): Promise<void> {
    await this.kill("SIGTERM");
    try {
      psql(`DROP SCHEMA IF EXISTS ${this.schema} CASCADE`);
    } catch {
      // the schema may not exist if the server never started
    }
    if (process.env["HOPPER_KEEP_LOGS"]) {
      process.stderr.write(`hopper serve's log kept in ${this.log}\n`);
    } else {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }

  counts(): Record<string, number> {
    const counts: Record<string, number> = {};
    for (const line of psql(`SELECT state, count(*) FROM ${this.schema}.jobs GROUP BY state`).split("\n")) {
      const [state, n] = line.split("|");
      if (state && n) counts[state] = Number(n);
    }
    return counts;
  }

  /** Waits until the job counts by state satisfy `predicate`; returns them. */
  async waitFor(predicate: (c: Record<string, number>) => boolean, timeoutMs = 60_000): Promise<Record<string, number>> {
    const deadline = Date.now() + timeoutMs;
    let counts: Record<string, number> = {};
    while (Date.now() < deadline) {
      counts = this.counts();
      if (predicate(counts)) return counts;
      await sleep(50);
    }
    throw new Error(`not reached within ${timeoutMs} ms; counts ${JSON.stringify(counts)}\nserver log:\n${readFileSync(this.log, "utf8")}`);
  }
}

export const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
