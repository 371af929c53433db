/**
 * Sending attempts' log lines as `log` requests, in order, again while they fail for a
 * transient reason.
 *
 * One request per attempt is in flight at a time: lines written meanwhile wait in the job's
 * buffer for the next one, so an attempt's lines are stored in the order written. A request
 * the server answers with a transient error (`internal` with `transient` true: the database
 * away, the server busy), or that cannot be sent, is sent again with backoff (50 ms doubling
 * to 1 s) for at most `RETRY_FOR_MS` after its first send; a permanent error, a request that
 * can never be sent (it cannot be encoded, or is over the server's frame limit), or the bound
 * reached, gives its lines up at once (logged, with how many): the job and the other
 * attempts' lines go on.
 *
 * A request left without a reply (none within the reply timeout, or the connection
 * replaced) is sent again at once, at most `RESENDS_UNANSWERED` times, each time with a
 * fresh `RETRY_FOR_MS` for transient errors; then its lines are given up. Each send takes a
 * fresh `req`, and only the last one's reply is taken: a late reply to an earlier one is not
 * read as the answer. So a batch is given up at most 3 × (5 s + the reply timeout) after its
 * first send (45 s with the default 10 s). Storage is at least once: a request sent again
 * after a store whose acknowledgement was lost is stored twice.
 */

import type { Message } from "./connection.js";
import { Unavailable } from "./errors.js";

/** How long (ms) after its first send a failed request is still sent again. */
const RETRY_FOR_MS = 5_000;
/** The first delay (ms) before sending a failed request again; it doubles... */
const FIRST_DELAY_MS = 50;
/** ...up to this. */
const MAX_DELAY_MS = 1_000;
/** How many times a request left without a reply is sent again before its lines are given up. */
const RESENDS_UNANSWERED = 2;

/** A `log` request of one attempt: sent and awaiting its reply (`req` set), or waiting to
 * be sent again. `timer`: the reply's deadline, or the next send. */
interface Request {
  message: Message;
  /** The first send, or the last one for lack of a reply: transient errors are sent again
   * for `RETRY_FOR_MS` after it. */
  firstSent: number;
  req: number | null;
  delay: number;
  tries: number;
  /** Times it was sent again for lack of a reply. */
  unanswered: number;
  timer: NodeJS.Timeout | null;
}

/** An attempt with a request in flight, and where its next lines come from. */
interface Attempt {
  take: () => Message | undefined;
  /** The attempt ended: its last lines go as soon as the request in flight settles. */
  last: boolean;
  /** Lines fell due while the request was in flight: they go as soon as it settles. */
  due: boolean;
  request: Request | null;
}

/** How the sender sends: the request's `req` and whether it left, or undefined when there
 * is no connection. `sent` rejects with `Unavailable` when it could not be sent now (sent
 * again later), with anything else when it can never be (its lines are given up). */
export type Send = (message: Message) => { req: number; sent: Promise<void> } | undefined;

/** The `log` requests of a worker's attempts (see the module's docs). */
export class LogSender {
  private readonly attempts = new Map<string, Attempt>();
  private readonly byReq = new Map<number, string>();

  /** `warn` reports lines given up and requests sent again for lack of a reply; `settled`
   * is called once no request is in flight. */
  constructor(
    private readonly send: Send,
    private readonly replyTimeoutMs: number,
    private readonly warn: (text: string) => void,
    private readonly settled: () => void,
  ) {}

  /** True while a request is in flight (sent, or waiting to be sent again). */
  pending(): boolean {
    return this.attempts.size > 0;
  }

  /** Sends the lines `take` gives for the attempt `key`, unless a request of it is in
   * flight (they go once it settles); `last`: the attempt ended. */
  offer(key: string, take: () => Message | undefined, last = false): void {
    let attempt = this.attempts.get(key);
    if (attempt === undefined) {
      attempt = { take, last, due: false, request: null };
      this.attempts.set(key, attempt);
    }
    attempt.last ||= last;
    if (attempt.request === null) this.next(key, attempt);
    else attempt.due = true;
  }

  /** Takes the reply if it answers a `log` request (true); false otherwise. */
  onReply(reply: Message): boolean {
    const req = reply["req"];
    const key = typeof req === "number" ? this.byReq.get(req) : undefined;
    const attempt = key === undefined ? undefined : this.attempts.get(key);
    if (key === undefined || attempt?.request == null || typeof req !== "number") return false;
    this.byReq.delete(req);
    const request = attempt.request;
    request.req = null;
    if (request.timer !== null) clearTimeout(request.timer);
    if (reply["type"] !== "error") {
      this.settle(key, attempt);
    } else if (reply["transient"] === true || reply["code"] === "unauthorized") {
      // Unauthorized: the server forgot the session; the worker says hello again.
      this.retryLater(key, attempt, `${String(reply["code"])}: ${String(reply["message"])}`);
    } else {
      this.giveUp(key, attempt, `refused: ${String(reply["message"])}`);
    }
    return true;
  }

  /** Sends again the requests awaiting a reply (after a reconnect: the old socket's
   * replies never come). */
  resend(): void {
    for (const [key, attempt] of this.attempts) {
      const request = attempt.request;
      if (request?.req != null) this.unanswered(key, attempt, "reconnected", false);
    }
  }

  /** Stops every timer (the worker left). */
  close(): void {
    for (const attempt of this.attempts.values()) {
      if (attempt.request?.timer != null) clearTimeout(attempt.request.timer);
    }
    this.attempts.clear();
    this.byReq.clear();
  }

  private next(key: string, attempt: Attempt): void {
    attempt.due = false;
    const message = attempt.take();
    if (message === undefined) {
      this.attempts.delete(key);
      return;
    }
    const now = Date.now();
    attempt.request = { message, firstSent: now, req: null, delay: FIRST_DELAY_MS, tries: 0, unanswered: 0, timer: null };
    this.transmit(key, attempt);
  }

  private transmit(key: string, attempt: Attempt): void {
    const request = attempt.request;
    if (request === null) return;
    if (request.timer !== null) clearTimeout(request.timer);
    request.timer = null;
    request.tries += 1;
    const sending = this.send(request.message);
    if (sending === undefined) {
      this.retryLater(key, attempt, "not connected");
      return;
    }
    const { req, sent } = sending;
    request.req = req;
    this.byReq.set(req, key);
    request.timer = setTimeout(() => {
      if (request.req !== req) return;
      this.unanswered(key, attempt, `no reply within ${this.replyTimeoutMs} ms`, true);
    }, this.replyTimeoutMs);
    sent.catch((e: unknown) => {
      if (request.req !== req) return;
      this.byReq.delete(req);
      request.req = null;
      if (e instanceof Unavailable) this.retryLater(key, attempt, `not sent: ${String(e)}`);
      else this.giveUp(key, attempt, String(e)); // unencodable or too large: again cannot help
    });
  }

  /** The request in flight will get no reply: sent again under a fresh `req` (the old
   * one's late reply, if any, is then not taken), with a fresh window for transient errors,
   * unless it was sent again `RESENDS_UNANSWERED` times already. `warn`: say so. */
  private unanswered(key: string, attempt: Attempt, why: string, warn: boolean): void {
    const request = attempt.request;
    if (request?.req == null) return;
    this.byReq.delete(request.req);
    request.req = null;
    if (request.unanswered >= RESENDS_UNANSWERED) {
      this.giveUp(key, attempt, `${why}, after ${request.tries} tries`);
      return;
    }
    request.unanswered += 1;
    if (warn) {
      this.warn(`log of job ${String(request.message["id"])} attempt ${String(request.message["attempt"])}: ${why}; sending it again`);
    }
    request.firstSent = Date.now();
    request.delay = FIRST_DELAY_MS;
    this.transmit(key, attempt);
  }

  private retryLater(key: string, attempt: Attempt, why: string): void {
    const request = attempt.request;
    if (request === null) return;
    if (request.timer !== null) clearTimeout(request.timer);
    if (Date.now() + request.delay >= request.firstSent + RETRY_FOR_MS) {
      this.giveUp(key, attempt, `still failing after ${request.tries} tries: ${why}`);
      return;
    }
    request.timer = setTimeout(() => this.transmit(key, attempt), request.delay);
    request.delay = Math.min(request.delay * 2, MAX_DELAY_MS);
  }

  private giveUp(key: string, attempt: Attempt, why: string): void {
    const request = attempt.request;
    if (request === null) return;
    const lines = Array.isArray(request.message["lines"]) ? request.message["lines"].length : 0;
    this.warn(`${lines} log lines of job ${String(request.message["id"])} attempt ${String(request.message["attempt"])} are lost: ${why}`);
    this.settle(key, attempt);
  }

  /** The request in flight is done with: the attempt's next lines go if due. Called from a
   * reply or a timer, never from `offer` (whose caller goes on: an outcome to send). */
  private settle(key: string, attempt: Attempt): void {
    if (attempt.request?.timer != null) clearTimeout(attempt.request.timer);
    attempt.request = null;
    if (attempt.last || attempt.due) {
      this.next(key, attempt);
    } else {
      this.attempts.delete(key);
    }
    if (this.attempts.size === 0) this.settled();
  }
}
