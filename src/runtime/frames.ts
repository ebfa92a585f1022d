/**
 * The framing of the process-device protocol (docs/process-devices.md): each message is a
 * 4-byte big-endian header length, the header as UTF-8 JSON (an object), then `payloadBytes`
 * bytes of payload (the header's field; 0 or absent: none).
 */
import { roundedIntegers } from './json-walk.js';

/**
 * The largest header accepted, 64 MiB: JSON inputs, prepared values and outputs travel in it
 * (bytes go as the payload). Under 0x09090909: four printable bytes — text written to stdout by
 * mistake — still read as a length over it. (At 1 MiB, a 1.5 MiB JSON output was refused, and
 * blamed on something else writing to stdout.)
 */
export const MAX_HEADER_BYTES = 64 << 20;

/** A message: its JSON header and its payload (absent when it has none). */
export interface Frame {
  header: Record<string, unknown>;
  payload?: Uint8Array;
  /** The integers in the header that JSON.parse rounded (a helper not in Python, or an old one, sent them), and where. */
  rounded?: { literal: string; path: string }[];
}

/** Whether bytes are a JSON object (UTF-8). */
function isJsonObject(bytes: Uint8Array): boolean {
  try {
    const v: unknown = JSON.parse(UTF8.decode(bytes));
    return v !== null && typeof v === 'object' && !Array.isArray(v);
  } catch {
    return false;
  }
}

/** Headers are UTF-8 JSON: other bytes fail (replaced with U+FFFD, an output was changed without a word). */
const UTF8 = new TextDecoder('utf-8', { fatal: true });

/** A frame that breaks the protocol: the stream cannot be trusted after it. */
export class FrameError extends Error {
  override readonly name = 'FrameError';

  constructor(
    message: string,
    /** A well-formed frame whose payload is over the limit (an output too large): the same item would send it again. */
    readonly oversize = false,
  ) {
    super(message);
  }
}

/** The bytes of one frame: `payload` (if any) follows the header, whose payloadBytes is set to its length. */
export function encodeFrame(header: Record<string, unknown>, payload?: Uint8Array): Buffer[] {
  const json = Buffer.from(JSON.stringify(payload ? { ...header, payloadBytes: payload.byteLength } : header), 'utf8');
  if (json.length > MAX_HEADER_BYTES) {
    // The same value would be as large again: no retry.
    throw Object.assign(new FrameError(`its JSON is ${json.length} bytes, over the ${MAX_HEADER_BYTES} bytes a frame header carries: return large data as bytes (a Buffer or typed array), which go as the payload`), { retry: false as const });
  }
  const len = Buffer.alloc(4);
  len.writeUInt32BE(json.length, 0);
  return payload ? [len, json, Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength)] : [len, json];
}

/** Reads frames out of a byte stream fed in chunks; throws a {@link FrameError} at the first broken one. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** The header of the frame whose payload is still arriving. */
  private pending: { header: Record<string, unknown>; payloadBytes: number; rounded?: Frame['rounded'] } | undefined;

  constructor(
    /** The largest payload accepted, bytes. */
    private readonly maxPayloadBytes: number,
  ) {}

  /** Bytes received and not yet part of a whole frame. */
  get bufferedBytes(): number {
    return this.buffered;
  }

  /** Adds a chunk; returns the frames it completed. */
  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Frame[] = [];
    for (;;) {
      if (!this.pending) {
        if (this.buffered < 4) break;
        const head = this.peek(4);
        const headerBytes = head.readUInt32BE(0);
        if (headerBytes === 0 || headerBytes > MAX_HEADER_BYTES) {
          if (this.buffered < 5) break; // (the byte after the length says which mistake this is)
          const next = this.peek(5)[4];
          // The length written little-endian: a JSON object of that length follows (a device of one's own, not a helper's).
          const le = head.readUInt32LE(0);
          if (next === 0x7b && le > 0 && le <= MAX_HEADER_BYTES) {
            if (this.buffered < 4 + le) break;
            if (isJsonObject(this.peek(4 + le).subarray(4))) throw new FrameError(`a frame header length of ${headerBytes} bytes, ${le} read little-endian, and a JSON header of ${le} bytes after it: write the length as 4 bytes big-endian (network order: Python struct.pack(">I", n), Go binary.BigEndian.PutUint32)`);
          }
          // A header that is JSON, over the limit: an output too large to go as JSON (it would come again).
          if (headerBytes > MAX_HEADER_BYTES && next === 0x7b) throw new FrameError(`a frame header of ${headerBytes} bytes is over the ${MAX_HEADER_BYTES} bytes a header carries: return large data as bytes, which go as the payload`, true);
          // Text printed to stdout reads as a huge length: show those bytes as text too (what has come of them, up to 80).
          const text = /^[\x20-\x7e\t\r\n]{4}$/.test(head.toString('latin1')) ? ` (as text: ${JSON.stringify(this.peek(Math.min(this.buffered, 80)).toString('latin1'))}…)` : '';
          throw new FrameError(`a frame header length of ${headerBytes} bytes${text} (the limit is ${MAX_HEADER_BYTES}): the stream is not stoker frames — is something else writing to stdout?`);
        }
        if (this.buffered < 4 + headerBytes) break;
        this.take(4);
        let text: string;
        try {
          text = UTF8.decode(this.take(headerBytes));
        } catch {
          throw new FrameError('a frame header is not UTF-8: write its JSON as UTF-8 text (with ensure_ascii, or encode("utf-8"))');
        }
        let header: unknown;
        try {
          header = JSON.parse(text);
        } catch {
          throw new FrameError(`a frame header is not JSON: ${JSON.stringify(text.slice(0, 80))}`);
        }
        if (header === null || typeof header !== 'object' || Array.isArray(header)) throw new FrameError(`a frame header must be a JSON object, got ${text.slice(0, 80)}`);
        const h = header as Record<string, unknown>;
        const p = h['payloadBytes'] ?? 0;
        if (typeof p !== 'number' || !Number.isSafeInteger(p) || p < 0) throw new FrameError(`payloadBytes must be a whole number ≥ 0, got ${JSON.stringify(p)}`);
        if (p > this.maxPayloadBytes) throw new FrameError(`a frame payload of ${p} bytes is over the ${this.maxPayloadBytes}-byte limit: raise [device.process] maxFrameBytes, or return less`, true);
        const rounded = roundedIntegers(text, h);
        this.pending = { header: h, payloadBytes: p, ...(rounded.length > 0 ? { rounded } : {}) };
      }
      const { header, payloadBytes, rounded } = this.pending;
      if (this.buffered < payloadBytes) break;
      this.pending = undefined;
      out.push({ header, ...(payloadBytes > 0 ? { payload: new Uint8Array(this.take(payloadBytes)) } : {}), ...(rounded ? { rounded } : {}) });
    }
    return out;
  }

  private peek(n: number): Buffer {
    if ((this.chunks[0] as Buffer).length < n) this.chunks = [Buffer.concat(this.chunks)];
    return (this.chunks[0] as Buffer).subarray(0, n);
  }

  private take(n: number): Buffer {
    const first = this.chunks[0] as Buffer;
    if (first.length < n) this.chunks = [Buffer.concat(this.chunks)];
    const head = this.chunks[0] as Buffer;
    const out = head.subarray(0, n);
    if (head.length === n) this.chunks.shift();
    else this.chunks[0] = head.subarray(n);
    this.buffered -= n;
    return out;
  }
}
