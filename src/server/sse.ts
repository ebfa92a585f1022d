/**
 * What the server's event streams (`/v1/events`, `/v1/jobs/:id/events`) write through: a client
 * that stops reading cannot make them hold memory, and an event is made into text once, however
 * many streams send it.
 */
import type { FastifyReply } from 'fastify';
import type { ServerResponse } from 'node:http';

/**
 * Bytes a stream may hold unsent (beyond a replay written at once) before its client counts as
 * not reading and the connection is ended: 256 streams that never read grew the heap to its limit
 * and the server died (a hostile-input trial). A client that reconnects with Last-Event-ID gets
 * what it missed, or a gap.
 */
export const STREAM_BUFFER_MAX = 1 << 20;

const HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' };

/** An event's text as a stream sends it, made once per event object (every stream, and every replay, sends the same). */
const frames = new WeakMap<object, { id: string; text: string }>();
export function eventFrame(event: { type: string }, id: string): string {
  let f = frames.get(event);
  if (f?.id !== id) {
    f = { id, text: `id: ${id}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n` };
    frames.set(event, f);
  }
  return f.text;
}

export class EventStreamOut {
  private allowance = STREAM_BUFFER_MAX;

  /** Starts the stream: its headers, and `comment` and the client's reconnect delay. */
  constructor(
    private readonly res: ServerResponse,
    comment: string,
  ) {
    res.writeHead(200, HEADERS);
    res.write(`: ${comment}\nretry: 2000\n\n`);
    res.on('drain', () => (this.allowance = STREAM_BUFFER_MAX));
  }

  /** Writes `text`, or ends the connection where more than the allowance is still unsent. */
  write(text: string): void {
    const res = this.res;
    if (res.destroyed || res.writableEnded) return;
    if (res.writableLength > this.allowance) {
      res.destroy();
      return;
    }
    res.write(text);
  }

  /** Writes a block at once (a replay), allowed beside the usual until it is sent. */
  writeBlock(text: string): void {
    if (this.res.destroyed || this.res.writableEnded) return;
    this.allowance = STREAM_BUFFER_MAX + Buffer.byteLength(text);
    this.res.write(text);
  }

  end(): void {
    if (!this.res.destroyed) this.res.end();
  }
}

/** The answer to a HEAD of an event stream: its headers, no stream (it held a stream's place, unanswered, for good). */
export function headOfStream(reply: FastifyReply): FastifyReply {
  return reply.code(200).headers(HEADERS).send();
}
