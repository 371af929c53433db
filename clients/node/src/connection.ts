/**
 * One DEALER socket to the server: hello, request numbering, replies matched by `req`,
 * reconnects, CURVE (docs/protocol.md §1–§4).
 */

import { hostname } from "node:os";

import { Decoder, Encoder } from "cbor-x";
import { Dealer, capability, curveKeyPair } from "zeromq";

import { HopperError, Unavailable, Unencodable } from "./errors.js";
import { illFormedText } from "./values.js";

/** The protocol version this package speaks. */
export const PROTOCOL_VERSION = 1;

/** A protocol message: one CBOR map with text keys (docs/protocol.md §2). */
export type Message = Record<string, unknown>;

/** How to reach and authenticate with a server; shared by `Client` and `Worker`. */
export interface ConnectionOptions {
  /** A token from the server's token file. Default: the `HOPPER_TOKEN` environment variable. */
  token?: string | undefined;
  /**
   * The server's CURVE public key (40 Z85 characters): encrypts the connection. Default:
   * the `HOPPER_SERVER_KEY` environment variable; plaintext without either.
   */
  serverKey?: string | undefined;
  /** How long to wait for a reply, in milliseconds. Default 10,000. */
  timeoutMs?: number | undefined;
  /** The name in the server's logs. Default `host:pid`. */
  name?: string | undefined;
}

/** Where warnings go (a worker's skipped frames, refused outcomes, reconnects). */
export interface Logger {
  warn(message: string): void;
}

// Plain maps with text keys, no CBOR tags, no record extension: what the protocol wants.
const encoder = new Encoder({ useRecords: false, mapsAsObjects: true, tagUint8Array: false });
const decoder = new Decoder({ useRecords: false, mapsAsObjects: true });

/**
 * `value` with every `bigint` that `Number` holds exactly made a `number`. Integers of 33 to
 * 64 bits arrive in CBOR's 8-byte form, which cbor-x reads as `bigint`s, so a job's
 * `{"at": 1700000000000}` would reach its handler as a value that arithmetic with numbers
 * and `JSON.stringify` refuse. Up to 2^53 − 1 they are read as `JSON.parse` reads them;
 * past it they stay `bigint`s, exact, as a `bigint` sent comes back.
 */
function safeIntegers(value: unknown): unknown {
  if (typeof value === "bigint") {
    return value >= MIN_SAFE && value <= MAX_SAFE ? Number(value) : value;
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = safeIntegers(value[i]);
  } else if (value !== null && typeof value === "object") {
    const map = value as Record<string, unknown>;
    for (const key of Object.keys(map)) map[key] = safeIntegers(map[key]);
  }
  return value;
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A frame decoded, its safe integers as numbers: walked only if it may hold an 8-byte one. */
function decodeFrame(frame: Buffer): unknown {
  const message: unknown = decoder.decode(frame);
  return frame.includes(0x1b) || frame.includes(0x3b) ? safeIntegers(message) : message;
}

const Z85 = /^[0-9a-zA-Z.\-:+=^!/*?&<>()[\]{}@%$#]{40}$/;

/** The server key checked: 40 Z85 characters, and a libzmq that can use it. */
export function checkServerKey(key: string): string {
  if (!Z85.test(key)) {
    throw new TypeError("serverKey must be the server's public key: 40 Z85 characters");
  }
  if (!capability.curve) {
    throw new TypeError("this zeromq build has no CURVE support, so serverKey cannot be used");
  }
  return key;
}

/** The name a peer gives in its hello unless told otherwise. */
export function defaultName(): string {
  return `${hostname()}:${process.pid}`;
}

interface Pending {
  resolve(reply: Message): void;
  reject(error: Error): void;
}

/**
 * A DEALER socket that says hello and matches replies to requests by `req`. Pushes
 * (`order`, `cancel`) and replies nobody awaits go to `onMessage`.
 */
export class Connection {
  /** The heartbeat period the server announced in its `welcome`. */
  heartbeatMs = 5_000;
  /** The largest frame the server takes. */
  maxFrame = 2 * 1024 * 1024;
  /** When the server was last heard from (`Date.now()`). */
  lastHeard = Date.now();
  readonly token: string | undefined;
  readonly serverKey: string | undefined;
  readonly timeoutMs: number;
  private socket: Dealer | null = null;
  private readonly pending = new Map<number, Pending>();
  private reqs = 0;
  private sending: Promise<void> = Promise.resolve();

  constructor(
    readonly endpoint: string,
    private readonly hello: Message,
    options: ConnectionOptions,
    private readonly onMessage: (message: Message) => void = () => {},
  ) {
    this.token = options.token ?? process.env["HOPPER_TOKEN"];
    const key = options.serverKey ?? (process.env["HOPPER_SERVER_KEY"] || undefined);
    this.serverKey = key === undefined ? undefined : checkServerKey(key);
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  /** A fresh request number. */
  nextReq(): number {
    this.reqs += 1;
    return this.reqs;
  }

  /** Creates the socket and says hello (rejects with `HopperError` if refused). */
  async open(): Promise<void> {
    this.close();
    const socket = new Dealer({
      linger: 0,
      reconnectInterval: 100,
      reconnectMaxInterval: 1_000,
      sendTimeout: this.timeoutMs,
    });
    if (this.serverKey !== undefined) {
      const own = curveKeyPair();
      socket.curveServerKey = this.serverKey;
      socket.curvePublicKey = own.publicKey;
      socket.curveSecretKey = own.secretKey;
    }
    socket.connect(this.endpoint);
    this.socket = socket;
    void this.receive(socket);
    await this.sayHello();
  }

  /** Closes the socket at once; requests still waiting fail with `Unavailable`. */
  close(): void {
    const socket = this.socket;
    this.socket = null;
    if (socket !== null) {
      socket.close();
    }
    for (const [req, pending] of this.pending) {
      this.pending.delete(req);
      pending.reject(new Unavailable("the connection was closed"));
    }
  }

  /**
   * Reopens and says hello again, retrying until `deadline` (`Date.now()` ms; for ever if
   * undefined). On failure the socket is closed.
   */
  async reconnect(deadline?: number): Promise<void> {
    let delay = 50;
    for (;;) {
      try {
        await this.open();
        return;
      } catch (e) {
        if (!(e instanceof Unavailable) || (deadline !== undefined && Date.now() + delay > deadline)) {
          this.close();
          throw e;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 1_000);
      }
    }
  }

  private async sayHello(): Promise<void> {
    const fields: Message = { version: PROTOCOL_VERSION, name: defaultName(), ...this.hello };
    if (this.token) fields["token"] = this.token;
    const welcome = await this.request("hello", fields, { rehello: false });
    if (typeof welcome["heartbeat_ms"] === "number") {
      this.heartbeatMs = Math.max(welcome["heartbeat_ms"], 10);
    }
    if (typeof welcome["max_frame"] === "number") this.maxFrame = welcome["max_frame"];
  }

  /** Sends one map (it must hold `type`), after the ones sent before it. Rejects (never
   * throws) with `Unencodable` when it cannot be encoded and `HopperError` `too_large` when
   * it is over the server's `max_frame` (whether connected or not: sending it again cannot
   * help), `Unavailable` when it cannot be sent now. */
  send(message: Message): Promise<void> {
    const type = String(message["type"]);
    let frame: Uint8Array;
    try {
      frame = encoder.encode(message);
    } catch (e) {
      // A value cbor-x has no form for (a function, a symbol): a rejection like any failed
      // send, never a throw out of a timer that would end the process.
      return Promise.reject(new Unencodable(`cannot encode ${type}: ${String(e)}`));
    }
    // cbor-x writes a lone surrogate of a short string as bytes that are no UTF-8 (0xED,
    // then 0xA0 to 0xBF; of a long one, as U+FFFD): the server could not even tell which
    // request they were, so the caller would wait for a reply in vain. Only a frame with
    // such a byte is searched (a walk of the message costs half its encoding).
    const illFormed = frame.indexOf(0xed) === -1 ? undefined : illFormedText(message, type);
    if (illFormed !== undefined) {
      return Promise.reject(new Unencodable(`cannot encode ${type}: ${illFormed} holds a lone surrogate, which UTF-8 cannot encode`));
    }
    if (frame.length > this.maxFrame) {
      return Promise.reject(
        new HopperError("too_large", `${frame.length} bytes is over the server's ${this.maxFrame}`),
      );
    }
    const socket = this.socket;
    if (socket === null) return Promise.reject(new Unavailable("the connection is closed"));
    // zeromq.js takes one send at a time: chain them.
    const sent = this.sending.then(() => socket.send(frame));
    this.sending = sent.catch(() => {});
    return sent.catch((e: unknown) => {
      // A send that timed out found no peer: a CURVE handshake that failed, as silence.
      const hint = /timed out/i.test(String(e)) ? this.curveHint() : "";
      throw new Unavailable(`cannot send ${String(message["type"])}: ${String(e)}${hint}`);
    });
  }

  /**
   * Sends a request and resolves with its reply. A server that forgot this session (it
   * restarted: `unauthorized`) is greeted again and asked once more.
   */
  async request(
    type: string,
    fields: Message = {},
    options: { timeoutMs?: number; rehello?: boolean } = {},
  ): Promise<Message> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        return await this.once(type, fields, deadline, timeoutMs);
      } catch (e) {
        if (
          e instanceof HopperError &&
          e.code === "unauthorized" &&
          options.rehello !== false &&
          attempt === 0
        ) {
          await this.sayHello();
          continue;
        }
        throw e;
      }
    }
    throw new Unavailable(`${type} refused twice`);
  }

  private once(type: string, fields: Message, deadline: number, timeoutMs: number): Promise<Message> {
    const req = this.nextReq();
    return new Promise<Message>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(req);
        reject(new Unavailable(this.silence(type, timeoutMs)));
      }, Math.max(deadline - Date.now(), 0));
      this.pending.set(req, {
        resolve: (reply) => {
          clearTimeout(timer);
          if (reply["type"] === "error") {
            reject(new HopperError(String(reply["code"]), String(reply["message"] ?? ""), req));
          } else {
            resolve(reply);
          }
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.send({ ...fields, type, req }).catch((e: unknown) => {
        this.pending.get(req)?.reject(e instanceof Error ? e : new Error(String(e)));
        this.pending.delete(req);
      });
    });
  }

  private silence(type: string, timeoutMs: number): string {
    // A CURVE handshake that fails is silent on the client's side.
    return `no reply to ${type} from ${this.endpoint} within ${timeoutMs} ms${this.curveHint()}`;
  }

  private curveHint(): string {
    return this.serverKey !== undefined
      ? " (is serverKey the public key of the server at that endpoint?)"
      : " (if the server uses CURVE, pass its public key as serverKey)";
  }

  private async receive(socket: Dealer): Promise<void> {
    try {
      for await (const frames of socket) {
        this.lastHeard = Date.now();
        const last = frames[frames.length - 1];
        let message: unknown;
        try {
          message = last === undefined ? undefined : decodeFrame(last);
        } catch {
          message = undefined;
        }
        if (message === null || typeof message !== "object" || Array.isArray(message)) {
          continue; // not a map: nothing to act on
        }
        const reply = message as Message;
        const req = reply["req"];
        const pending = typeof req === "number" ? this.pending.get(req) : undefined;
        if (pending !== undefined && typeof req === "number") {
          this.pending.delete(req);
          pending.resolve(reply);
        } else {
          this.onMessage(reply);
        }
      }
    } catch {
      // The socket was closed under the loop: its requests were failed by close().
    }
  }
}
