/** A preparation that fills its shared buffer with a pattern (stoker device-bench's large item). */
export function prepare(_input: unknown, ctx: { buffer?: SharedArrayBuffer }): null {
  if (ctx.buffer) new Uint8Array(ctx.buffer).fill(7);
  return null;
}
