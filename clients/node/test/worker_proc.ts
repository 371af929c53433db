/** A worker process for the fault tests: `node worker_proc.js ENDPOINT TOKEN SLEEP_MS`. Its
 * `nap` jobs sleep SLEEP_MS; its `chatter` jobs first log `lines` lines. */

import { Worker } from "../src/index.js";
import { sleep } from "./server.js";

const [endpoint, token, sleepMs] = process.argv.slice(2);
if (endpoint === undefined || token === undefined || sleepMs === undefined) {
  throw new Error("usage: worker_proc.js ENDPOINT TOKEN SLEEP_MS");
}
const worker = new Worker(endpoint, { token, concurrency: 5, name: "doomed" });
worker.handle("nap", () => sleep(Number(sleepMs)));
worker.handle("chatter", (job) => {
  const { lines } = job.args as { lines: number };
  for (let i = 0; i < lines; i++) job.log("info", `line ${i}`, { attempt: job.attempt });
  return sleep(Number(sleepMs));
});
await worker.run();
