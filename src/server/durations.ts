// Durations as the API's query strings and the CLI's flags write them (no imports: the CLI's client
// commands load this, not the server).

/** A duration — `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds — in ms; NaN where it is none (the CLI's flags read it too). */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  return m ? Number(m[1]) * ({ ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? 's'] as number) : NaN;
}

/**
 * Parses a long-poll wait (a duration). Returns ms — cut to `maxS` (server.maxWaitS: a client
 * asking for longer simply polls again) — or an error message.
 */
export function parseWait(text: string, maxS: number): number | string {
  const ms = parseDuration(text);
  if (Number.isNaN(ms)) return `wait must be a duration such as 30s, 500ms, 2m or 1h (got ${JSON.stringify(text)})`;
  return Math.min(ms, maxS * 1000);
}

/** Parses a look-back window (a duration); ms, or an error message. */
export function parseSince(text: string): number | string {
  const ms = parseDuration(text);
  return Number.isNaN(ms) ? `since must be a duration such as 30s, 5m or 1h (got ${JSON.stringify(text)})` : ms;
}
