/**
 * A pool of SharedArrayBuffers for prepared data. A SharedArrayBuffer posted to a worker thread is
 * shared, not copied, so an item prepared into a pooled buffer reaches the device worker without a
 * copy; returning the buffer to the pool lets the next item reuse it instead of allocating again
 * (the field engine's pinned-buffer pool went from 474 fresh allocations / 12 reuses to 24 / 48).
 *
 * Buffers come in size classes (powers of two and the quarter steps between them). Idle buffers are memory the process still holds, so
 * they are counted (`idleBytes`, `totalBytes`) and bounded (`maxBytes`, `maxIdleBytes`,
 * `idleTtlMs` with {@link BufferPool.trim}). "Freeing" a SharedArrayBuffer means dropping the
 * pool's reference to it; the memory goes once no thread holds it any more.
 */

/** Stable codes of {@link BufferPoolError}. */
export type BufferPoolErrorCode =
  /** A fresh buffer would take the pool over `maxBytes`. */
  | 'E_POOL_FULL'
  /** A requested size is not a positive safe integer. */
  | 'E_POOL_BAD_SIZE'
  /** A checkin of a buffer that is not leased from this pool (checked in twice, or foreign). */
  | 'E_POOL_NOT_LEASED'
  /** An option of {@link BufferPoolOptions} is out of range. */
  | 'E_POOL_BAD_OPTION';

/** The error class of the buffer pool: `code` is stable, `message` says what to do. */
export class BufferPoolError extends Error {
  override readonly name = 'BufferPoolError';
  constructor(
    readonly code: BufferPoolErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** Options of {@link BufferPool}; every one is optional. */
export interface BufferPoolOptions {
  /**
   * Most bytes the pool may hold, leased + idle; a checkout that needs a fresh buffer beyond it
   * throws `E_POOL_FULL`. A number > 0 or `Infinity`.
   * @default Infinity
   */
  maxBytes?: number;
  /**
   * Smallest size class; requests are rounded up to a class ≥ this (see {@link BufferPool.classOf}).
   * Must itself be a power of two (1, 2, 4, …).
   * @default 4096
   */
  minClassBytes?: number;
  /**
   * Idle buffers older than this (ms since their checkin, by the pool's clock) are freed by
   * {@link BufferPool.trim}. A number ≥ 0 or `Infinity`.
   * @default 30000
   */
  idleTtlMs?: number;
  /**
   * Most idle bytes kept; a checkin beyond it frees the buffer instead of keeping it. A number ≥ 0
   * or `Infinity` (0 keeps no idle buffers).
   * @default Infinity
   */
  maxIdleBytes?: number;
}

/** A leased buffer, as {@link BufferPool.checkout} returns it (frozen). */
export interface PooledBuffer {
  /**
   * Identifies this lease, unique within the pool: a later lease of the same memory gets a new id,
   * so a stale handle cannot check in someone else's lease.
   */
  readonly id: number;
  /** The memory, `classBytes` long; post it to worker threads to share it without copying. */
  readonly buffer: SharedArrayBuffer;
  /** The size class, ≥ the requested bytes (see {@link BufferPool.classOf}); equals `buffer.byteLength`. */
  readonly classBytes: number;
}

/** A snapshot of the pool's accounting; byte counts are in whole size classes. */
export interface BufferPoolStats {
  /** Bytes of buffers checked out now. */
  leasedBytes: number;
  /** Bytes of buffers kept idle for reuse. */
  idleBytes: number;
  /** `leasedBytes + idleBytes`: all the memory the pool holds. */
  totalBytes: number;
  /** Peak of `totalBytes` since the pool was made. */
  highWaterBytes: number;
  /** Buffers checked out now. */
  leased: number;
  /** Buffers kept idle now. */
  idle: number;
  /** Checkouts that allocated a fresh SharedArrayBuffer. */
  fresh: number;
  /** Checkouts served by an idle buffer. */
  reused: number;
  /** Buffers dropped by the pool: by `trim`, or at checkin over `maxIdleBytes`. */
  freed: number;
}

interface IdleBuffer {
  readonly buffer: SharedArrayBuffer;
  /** The pool's clock at checkin. */
  readonly since: number;
}

/**
 * The size class of `bytes` (a positive safe integer) in a pool whose smallest class is
 * `minClassBytes` (a power of two; a pool's default 4096): see {@link BufferPool.classOf}.
 */
export function sizeClass(bytes: number, minClassBytes = 4096): number {
  let p = minClassBytes;
  if (bytes <= p) return p;
  while (2 * p < bytes) p *= 2;
  // p < bytes ≤ 2p: the first quarter step that holds it.
  if (p % 4 === 0) for (let q = 5; q <= 7; q++) if ((p / 4) * q >= bytes) return (p / 4) * q;
  return 2 * p;
}

const DEFAULTS: Required<BufferPoolOptions> = {
  maxBytes: Infinity,
  minClassBytes: 4096,
  idleTtlMs: 30_000,
  maxIdleBytes: Infinity,
};

function isPowerOfTwo(n: number): boolean {
  if (!Number.isSafeInteger(n) || n < 1) return false;
  let c = 1;
  while (c < n) c *= 2;
  return c === n;
}

function resolveOptions(options: BufferPoolOptions): Required<BufferPoolOptions> {
  const o: Required<BufferPoolOptions> = {
    maxBytes: options.maxBytes ?? DEFAULTS.maxBytes,
    minClassBytes: options.minClassBytes ?? DEFAULTS.minClassBytes,
    idleTtlMs: options.idleTtlMs ?? DEFAULTS.idleTtlMs,
    maxIdleBytes: options.maxIdleBytes ?? DEFAULTS.maxIdleBytes,
  };
  const bad = (name: string, want: string, got: number): never => {
    throw new BufferPoolError('E_POOL_BAD_OPTION', `${name} must be ${want} (got ${String(got)})`);
  };
  if (!(o.maxBytes > 0)) bad('maxBytes', 'a number of bytes > 0, or Infinity for no limit', o.maxBytes);
  if (!isPowerOfTwo(o.minClassBytes)) bad('minClassBytes', 'a power of two such as 4096', o.minClassBytes);
  if (!(o.idleTtlMs >= 0)) bad('idleTtlMs', 'a number of ms ≥ 0, or Infinity to keep idle buffers until trim(true)', o.idleTtlMs);
  if (!(o.maxIdleBytes >= 0)) bad('maxIdleBytes', 'a number of bytes ≥ 0, or Infinity for no limit', o.maxIdleBytes);
  return o;
}

/**
 * A pool of SharedArrayBuffers in size classes (see {@link BufferPool.classOf}). Single-threaded: one thread owns the
 * pool and does every checkout and checkin; other threads only use the buffers.
 */
export class BufferPool {
  private readonly opts: Required<BufferPoolOptions>;
  /** Leases by id. */
  private readonly leasedById = new Map<number, PooledBuffer>();
  /** Idle buffers by class, oldest first (a stack: the last one is reused first). */
  private readonly idleByClass = new Map<number, IdleBuffer[]>();
  private nextId = 1;
  private leasedBytes = 0;
  private idleBytes = 0;
  private idleCount = 0;
  private highWaterBytes = 0;
  private fresh = 0;
  private reused = 0;
  private freed = 0;
  /** The size class of the last checkout (0: none yet): trimTo keeps its idle buffers. */
  private lastClass = 0;
  /** The bytes idle buffers may hold beside the memory budget's reservations, where a Runtime bounds the pool (see limitIdleTo). */
  private idleRoom: (() => number) | undefined;

  /**
   * @param options limits and size classes, merged once with the defaults; a value out of range
   *   throws `E_POOL_BAD_OPTION`.
   * @param now the clock in ms that stamps checkins for {@link BufferPool.trim}; inject one in
   *   tests. Defaults to `performance.now`.
   */
  constructor(
    options: BufferPoolOptions = {},
    private readonly now: () => number = () => performance.now(),
  ) {
    this.opts = resolveOptions(options);
  }

  /**
   * The size class a request of `bytes` maps to: the smallest of `minClassBytes` and the sizes
   * above it in quarter steps between powers of two — p, 1.25p, 1.5p, 1.75p, 2p for each power of
   * two p ≥ minClassBytes (the steps that are whole numbers) — that is ≥ `bytes`. (Powers of two
   * alone leased up to twice what was asked: 80 MiB partitions took 128 MiB each, 1.6× the memory
   * budget that counted 80.) Throws `E_POOL_BAD_SIZE` unless `bytes` is a positive safe integer.
   */
  classOf(bytes: number): number {
    if (!Number.isSafeInteger(bytes) || bytes < 1) {
      throw new BufferPoolError(
        'E_POOL_BAD_SIZE',
        `a buffer size must be a positive safe integer number of bytes (got ${String(bytes)}): round it up with Math.ceil, and check for 0 or NaN`,
      );
    }
    return sizeClass(bytes, this.opts.minClassBytes);
  }

  /**
   * Leases a buffer of at least `bytes` bytes (exactly its class, see {@link classOf}): the idle
   * buffer of that class returned most recently, else a fresh SharedArrayBuffer. Throws
   * `E_POOL_BAD_SIZE` for a size that is not a positive safe integer, and `E_POOL_FULL` when a
   * fresh buffer would take the pool over `maxBytes` (nothing changes then).
   */
  checkout(bytes: number): PooledBuffer {
    const classBytes = this.classOf(bytes);
    this.lastClass = classBytes;
    const stack = this.idleByClass.get(classBytes);
    const idle = stack?.pop();
    let buffer: SharedArrayBuffer;
    if (idle !== undefined) {
      buffer = idle.buffer;
      this.idleBytes -= classBytes;
      this.idleCount -= 1;
      this.reused += 1;
    } else {
      // Idle buffers of other sizes past the room beside the reservations are freed before a fresh
      // one is made, not after: a 2 MiB partition behind 1 MiB ones held both, twice the budget.
      if (this.idleRoom !== undefined && this.idleBytes > 0) this.trimTo(Math.max(0, this.idleRoom()));
      const total = this.leasedBytes + this.idleBytes;
      const would = total + classBytes;
      if (would > this.opts.maxBytes) {
        const what =
          classBytes > this.opts.maxBytes
            ? `one buffer of class ${classBytes} bytes is over maxBytes ${this.opts.maxBytes}: raise maxBytes or request fewer bytes`
            : `would hold ${would} bytes (${this.leasedBytes} leased, ${this.idleBytes} idle), over maxBytes ${this.opts.maxBytes}: raise maxBytes, lower concurrency, or trim`;
        throw new BufferPoolError('E_POOL_FULL', `checkout of ${bytes} bytes (class ${classBytes}) ${what}`);
      }
      buffer = new SharedArrayBuffer(classBytes); // allocate before accounting: a RangeError leaves the pool unchanged
      this.fresh += 1;
    }
    this.leasedBytes += classBytes;
    const totalBytes = this.leasedBytes + this.idleBytes;
    if (totalBytes > this.highWaterBytes) this.highWaterBytes = totalBytes;
    const lease: PooledBuffer = Object.freeze({ id: this.nextId++, buffer, classBytes });
    this.leasedById.set(lease.id, lease);
    return lease;
  }

  /**
   * Returns a leased buffer: it is kept idle for reuse, or freed if keeping it would take the idle
   * bytes over `maxIdleBytes`. Throws `E_POOL_NOT_LEASED` for a buffer checked in already or not
   * leased from this pool.
   */
  checkin(buf: PooledBuffer): void {
    const lease = this.leasedById.get(buf.id);
    if (lease === undefined || lease.buffer !== buf.buffer || lease.classBytes !== buf.classBytes) {
      throw new BufferPoolError(
        'E_POOL_NOT_LEASED',
        `buffer ${String(buf.id)} is not leased from this pool: it was checked in already, or it came from another pool or thread; check in exactly the handle checkout returned (a copy posted back from a worker is a different object), once`,
      );
    }
    this.leasedById.delete(lease.id);
    this.leasedBytes -= lease.classBytes;
    if (this.idleBytes + lease.classBytes > this.opts.maxIdleBytes) {
      this.freed += 1;
      return;
    }
    let stack = this.idleByClass.get(lease.classBytes);
    if (stack === undefined) {
      stack = [];
      this.idleByClass.set(lease.classBytes, stack);
    }
    stack.push({ buffer: lease.buffer, since: this.now() });
    this.idleBytes += lease.classBytes;
    this.idleCount += 1;
  }

  /**
   * Frees the idle buffers checked in more than `idleTtlMs` ago, or every idle buffer when `all`
   * is true; leased buffers are never touched. Returns the bytes freed.
   */
  trim(all = false): number {
    const now = all ? 0 : this.now();
    let freedBytes = 0;
    for (const [classBytes, stack] of this.idleByClass) {
      const keep = all ? [] : stack.filter((b) => !(now - b.since > this.opts.idleTtlMs));
      const dropped = stack.length - keep.length;
      if (dropped === 0) continue;
      freedBytes += dropped * classBytes;
      this.idleCount -= dropped;
      this.freed += dropped;
      if (keep.length === 0) this.idleByClass.delete(classBytes);
      else this.idleByClass.set(classBytes, keep);
    }
    this.idleBytes -= freedBytes;
    return freedBytes;
  }

  /**
   * Bounds the idle bytes by `room()` — what the memory budget has beside its reservations, which
   * count the buffer a checkout is for — when a checkout needs a fresh buffer: idle ones of other
   * sizes are freed first (see trimTo). A Runtime sets it for its workload's pool.
   */
  limitIdleTo(room: () => number): void {
    this.idleRoom = room;
  }

  /**
   * Frees idle buffers, the longest idle first, until the idle bytes are at most `maxIdleBytes` —
   * but none of the size class checked out last: the next preparations of that size take them
   * (freed, a SharedArrayBuffer's memory goes only once every thread that saw it has collected it,
   * and they would allocate afresh). Returns the bytes freed.
   */
  trimTo(maxIdleBytes: number): number {
    let freedBytes = 0;
    while (this.idleBytes > maxIdleBytes) {
      let oldest: { classBytes: number; stack: IdleBuffer[] } | undefined;
      for (const [classBytes, stack] of this.idleByClass) {
        const first = stack[0];
        if (first !== undefined && classBytes !== this.lastClass && (oldest === undefined || first.since < (oldest.stack[0] as IdleBuffer).since)) oldest = { classBytes, stack };
      }
      if (oldest === undefined) break;
      oldest.stack.shift();
      if (oldest.stack.length === 0) this.idleByClass.delete(oldest.classBytes);
      this.idleBytes -= oldest.classBytes;
      this.idleCount -= 1;
      this.freed += 1;
      freedBytes += oldest.classBytes;
    }
    return freedBytes;
  }

  /** A snapshot of the accounting (a fresh object each call). */
  stats(): BufferPoolStats {
    return {
      leasedBytes: this.leasedBytes,
      idleBytes: this.idleBytes,
      totalBytes: this.leasedBytes + this.idleBytes,
      highWaterBytes: this.highWaterBytes,
      leased: this.leasedById.size,
      idle: this.idleCount,
      fresh: this.fresh,
      reused: this.reused,
      freed: this.freed,
    };
  }
}
