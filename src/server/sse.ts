/**
 * What the server's event streams (`/v1/events`, `/v1/jobs/:id/events`) write through: a client
 * that stops reading cannot make them hold memory, and an event is made into text once, however
 * many streams send it.
 */
import type { FastifyReply } from 'fastify';
import type { ServerResponse } from 'node:http';

/**
 * Bytes a stream may hold unsent before its client counts as not reading and the connection is
 * ended: 256 streams that never read grew the heap to its limit
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

/** A replay is written in pieces of about this many bytes, each once the one before is sent. */
const REPLAY_PIECE_BYTES = 64 * 1024;

export class EventStreamOut {
  /** While a replay is written: the live events that came meanwhile, sent after it (undefined: none is). */
  private held: string[] | undefined;
  private heldBytes = 0;

  /** Starts the stream: its headers, and `comment` and the client's reconnect delay. */
  constructor(
    private readonly res: ServerResponse,
    comment: string,
  ) {
    res.writeHead(200, HEADERS);
    res.write(`: ${comment}\nretry: 2000\n\n`);
  }

  private get gone(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  /**
   * Writes `text`, or ends the connection where more than STREAM_BUFFER_MAX is still unsent (during
   * a replay: where more than that came meanwhile).
   */
  write(text: string): void {
    if (this.gone) return;
    if (this.held) {
      this.held.push(text);
      this.heldBytes += text.length;
      if (this.heldBytes > STREAM_BUFFER_MAX) this.res.destroy();
      return;
    }
    if (this.res.writableLength > STREAM_BUFFER_MAX) {
      this.res.destroy();
      return;
    }
    this.res.write(text);
  }

  /**
   * Writes a replay (the frames a reconnecting client missed) piece by piece as the client reads
   * them — written at once, ten thousand events were held per stream — then the live events that
   * came meanwhile, in order. Resolves when it is written, or the client is gone.
   */
  async replay(frames: readonly string[]): Promise<void> {
    this.held = [];
    let piece = '';
    const send = async () => {
      if (piece === '' || this.gone) return;
      const sent = this.res.write(piece);
      piece = '';
      if (!sent) await this.drained();
    };
    try {
      for (const f of frames) {
        piece += f;
        if (piece.length >= REPLAY_PIECE_BYTES) await send();
        if (this.gone) return;
      }
      await send();
    } finally {
      const held = this.held;
      this.held = undefined;
      this.heldBytes = 0;
      for (const text of held) this.write(text);
    }
  }

  /** Resolves once what is unsent has gone out, or the connection is gone. */
  private drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.res.off('drain', done);
        this.res.off('close', done);
        resolve();
      };
      this.res.once('drain', done);
      this.res.once('close', done);
    });
  }

  end(): void {
    if (!this.res.destroyed) this.res.end();
  }
}

/** The answer to a HEAD of an event stream: its headers, no stream (it held a stream's place, unanswered, for good). */
export function headOfStream(reply: FastifyReply): FastifyReply {
  return reply.code(200).headers(HEADERS).send();
}
