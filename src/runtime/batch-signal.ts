/** A batch's signal: it fires once every item of the batch is withdrawn (a batch of one: with its item). */
export function batchSignal(items: readonly { signal: AbortSignal }[]): AbortSignal {
  if (items.length === 1) return (items[0] as { signal: AbortSignal }).signal;
  const all = new AbortController();
  const check = () => {
    if (items.every((c) => c.signal.aborted)) all.abort(items[0]?.signal.reason);
  };
  for (const c of items) c.signal.addEventListener('abort', check, { once: true });
  check();
  return all.signal;
}
