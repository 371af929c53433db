/** A worker process for the fault tests: `node worker_proc.js ENDPOINT TOKEN SLEEP_MS`. */

import { Worker } from "../src/index.js";
import { sleep } from "./server.js";

const [endpoint, token, sleepMs] = process.argv.slice(2);
if (endpoint === undefined || token === undefined || sleepMs === undefined) {
  throw new Error("usage: worker_proc.js ENDPOINT TOKEN SLEEP_MS");
}
const worker = new Worker(endpoint, { token, concurrency: 5, name: "doomed" });
worker.handle("nap", () => sleep(Number(sleepMs)));
await worker.run();
