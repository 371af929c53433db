/**
 * Continues a job's trace with OpenTelemetry when `@opentelemetry/api` is installed (an
 * optional peer dependency): each job runs inside a `hopper.job` span (kind CONSUMER) whose
 * parent is the W3C trace context stored in the job's meta by whoever enqueued it
 * (`meta.traceparent`, `meta.tracestate`), extracted with the propagator the application
 * registered (the Node SDK registers the W3C one). With no SDK registered, the API records
 * nothing; without the package, jobs run as before.
 */

import type * as Otel from "@opentelemetry/api";
import type { Message } from "./connection.js";

type Api = typeof Otel;

/** The API, once `load` found it; `null` when it is not installed. */
let api: Api | null | undefined;

/** Loads `@opentelemetry/api` if it is installed (once). */
export async function load(): Promise<void> {
  if (api !== undefined) return;
  try {
    api = await import("@opentelemetry/api");
  } catch {
    api = null;
  }
}

/** The trace context of a job's meta (string values only). */
export function carrier(meta: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of ["traceparent", "tracestate"]) {
    const value = meta[key];
    if (typeof value === "string") out[key] = value;
  }
  return out;
}

/** What one job's span needs from the job. */
export interface Traced {
  id: string;
  attempt: number;
  queue: string | undefined;
  kind: string;
  meta: Record<string, unknown>;
}

/** Runs `body` inside the job's span and records the outcome message it resolves to. */
export async function inJobSpan(job: Traced, body: () => Promise<Message>): Promise<Message> {
  if (api === undefined || api === null) return body();
  const otel = api;
  const parent = otel.propagation.extract(otel.ROOT_CONTEXT, carrier(job.meta));
  const span = otel.trace.getTracer("hopper-client").startSpan(
    "hopper.job",
    {
      kind: otel.SpanKind.CONSUMER,
      attributes: { job_id: job.id, attempt: job.attempt, queue: job.queue ?? "", kind: job.kind },
    },
    parent,
  );
  try {
    const outcome = await otel.context.with(otel.trace.setSpan(parent, span), body);
    const type = String(outcome["type"] ?? "");
    span.setAttribute("outcome", type === "failed" && outcome["retryable"] === true ? "retry" : type);
    if (typeof outcome["duration_ms"] === "number") span.setAttribute("duration_ms", outcome["duration_ms"]);
    if (type === "failed") {
      const error = String(outcome["error"] ?? "");
      span.setAttribute("error", error);
      span.setStatus({ code: otel.SpanStatusCode.ERROR, message: error });
    }
    return outcome;
  } finally {
    span.end();
  }
}
