/** The server refused a request: `code` is the protocol's error code (docs/protocol.md §3). */
export class HopperError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly req: number | null = null,
  ) {
    super(`${code}: ${message}`);
    this.name = "HopperError";
  }
}

/** No reply in time, or the connection was lost: retrying later may succeed. */
export class Unavailable extends HopperError {
  constructor(message: string) {
    super("unavailable", message);
    this.name = "Unavailable";
  }
}

/** A message that cannot be encoded as the protocol's CBOR (it holds a value CBOR has no
 * form for, such as a function): sending it again cannot help. Its `code` is `invalid`. */
export class Unencodable extends HopperError {
  constructor(message: string) {
    super("invalid", message);
    this.name = "Unencodable";
  }
}
