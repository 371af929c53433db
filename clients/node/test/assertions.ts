/** Assertions shared by the tests. */

import assert from "node:assert/strict";

/** Asserts that `call` throws (or rejects with) `type`, its message matching `pattern`. */
export async function refuses(call: () => unknown, type: typeof TypeError | typeof RangeError, pattern: RegExp): Promise<void> {
  await assert.rejects(
    async () => {
      await call();
    },
    (e: unknown) => {
      assert.ok(e instanceof type, `${String(e)} is not a ${type.name}`);
      assert.match((e as Error).message, pattern);
      return true;
    },
  );
}
