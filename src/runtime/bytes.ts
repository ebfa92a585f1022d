/**
 * The one test of "is this value bytes" (ArrayBuffer, SharedArrayBuffer, a typed array, a
 * DataView, a Buffer), used wherever a stage's value may be bytes or JSON.
 */

/** The value as a Uint8Array when it is bytes, else undefined. Memory shared with other threads is copied (a pooled buffer is reused once its step ends). */
export function asBytes(v: unknown): Uint8Array | undefined {
  if (v instanceof ArrayBuffer) return new Uint8Array(v);
  if (v instanceof SharedArrayBuffer) return new Uint8Array(v).slice();
  if (ArrayBuffer.isView(v)) {
    const view = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
    return v.buffer instanceof SharedArrayBuffer ? view.slice() : view;
  }
  return undefined;
}
