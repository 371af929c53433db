/** A job's span continues the trace stored in its meta (src/tracing.ts), with the
 * OpenTelemetry SDK's in-memory exporter and the W3C propagator registered as the
 * application would. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { context, propagation, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

import { carrier, inJobSpan, load } from "../src/tracing.js";

const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
propagation.setGlobalPropagator(new W3CTraceContextPropagator());
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT = "00f067aa0ba902b7";
const job = (meta: Record<string, unknown>) => ({ id: "0193-job", attempt: 2, queue: "mail", kind: "welcome", meta });

test("only string trace context entries are read from the meta", () => {
  assert.deepEqual(carrier({ traceparent: 7, tracestate: "k=v", user: "x" }), { tracestate: "k=v" });
});

test("the job's span is a child of the enqueuing span and records the outcome", async () => {
  await load();
  exporter.reset();
  let active = "";
  const outcome = await inJobSpan(job({ traceparent: `00-${TRACE}-${PARENT}-01` }), async () => {
    active = trace.getSpan(context.active())?.spanContext().traceId ?? "";
    return { type: "failed", error: "boom", retryable: true, duration_ms: 3 };
  });
  assert.equal(outcome["type"], "failed");
  const [span] = exporter.getFinishedSpans();
  assert.ok(span, "one span exported");
  assert.equal(span.name, "hopper.job");
  assert.equal(span.kind, SpanKind.CONSUMER);
  assert.equal(span.spanContext().traceId, TRACE);
  assert.equal(span.parentSpanContext?.spanId, PARENT);
  assert.equal(active, TRACE, "the handler runs inside the span");
  assert.equal(span.attributes["outcome"], "retry");
  assert.equal(span.attributes["attempt"], 2);
  assert.equal(span.status.code, SpanStatusCode.ERROR);
});

test("a job with no trace context starts a trace of its own", async () => {
  await load();
  exporter.reset();
  await inJobSpan(job({}), async () => ({ type: "completed" }));
  const [span] = exporter.getFinishedSpans();
  assert.ok(span);
  assert.equal(span.parentSpanContext, undefined);
  assert.equal(span.attributes["outcome"], "completed");
});
