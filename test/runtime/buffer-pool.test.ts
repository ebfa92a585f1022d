import { Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  BufferPool,
  BufferPoolError,
  type BufferPoolErrorCode,
  type BufferPoolOptions,
  type BufferPoolStats,
  type PooledBuffer,
} from '../../src/runtime/buffer-pool.js';

/** Asserts that `fn` throws a BufferPoolError with this code (and, optionally, a message matching `message`). */
function expectPoolError(fn: () => unknown, code: BufferPoolErrorCode, message?: RegExp | string): BufferPoolError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught, `expected a BufferPoolError ${code}`).toBeInstanceOf(BufferPoolError);
  const err = caught as BufferPoolError;
  expect(err.code).toBe(code);
  expect(err.name).toBe('BufferPoolError');
  if (message !== undefined) expect(err.message).toMatch(message);
  return err;
}

/** A clock the test moves by hand. */
function manualClock(): { now: () => number; advance: (ms: number) => void } {
  let t = 0;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

describe('BufferPool size classes', () => {
  it('rounds requests up to a power of two or a quarter step between two, at least minClassBytes (default 4096)', () => {
    const pool = new BufferPool();
    expect(pool.classOf(1)).toBe(4096);
    expect(pool.classOf(4095)).toBe(4096);
    expect(pool.classOf(4096)).toBe(4096);
    expect([4097, 5121, 6145, 7169, 8193].map((n) => pool.classOf(n))).toEqual([5120, 6144, 7168, 8192, 10_240]);
    expect(pool.classOf(100_000)).toBe(114_688);
    // A large partition's buffer is not rounded up to the next power of two (80 MiB took 128).
    expect(pool.classOf(80 * 2 ** 20)).toBe(80 * 2 ** 20);
    expect(pool.classOf(2 ** 40 + 1)).toBe(1.25 * 2 ** 40);
    expect(pool.classOf(Number.MAX_SAFE_INTEGER)).toBe(2 ** 53);
    // Never more than a quarter over what was asked, past the smallest class.
    for (let n = 4097; n < 1_000_000; n += 997) expect(pool.classOf(n) / n).toBeLessThanOrEqual(1.25);

    // (Quarter steps only where they are whole numbers.)
    const small = new BufferPool({ minClassBytes: 1 });
    expect([1, 2, 3, 5, 8, 9].map((n) => small.classOf(n))).toEqual([1, 2, 4, 5, 8, 10]);
  });

  it('checkout returns a SharedArrayBuffer exactly its class long', () => {
    const pool = new BufferPool({ minClassBytes: 64 });
    const b = pool.checkout(100);
    expect(b.classBytes).toBe(112);
    expect(b.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(b.buffer.byteLength).toBe(112);
    expect(Object.isFrozen(b)).toBe(true);
  });

  it('rejects sizes that are not positive safe integers with E_POOL_BAD_SIZE, changing nothing', () => {
    const pool = new BufferPool();
    for (const bad of [0, -1, 1.5, NaN, Infinity, -Infinity, 2 ** 53]) {
      expectPoolError(() => pool.classOf(bad), 'E_POOL_BAD_SIZE', /positive safe integer/);
      expectPoolError(() => pool.checkout(bad), 'E_POOL_BAD_SIZE', String(bad));
    }
    expect(pool.stats()).toMatchObject({ totalBytes: 0, fresh: 0, leased: 0 });
  });

  it('rejects out-of-range options with E_POOL_BAD_OPTION naming the option', () => {
    const cases: [BufferPoolOptions, RegExp][] = [
      [{ maxBytes: 0 }, /maxBytes/],
      [{ maxBytes: NaN }, /maxBytes/],
      [{ minClassBytes: 3000 }, /minClassBytes must be a power of two/],
      [{ minClassBytes: 0 }, /minClassBytes/],
      [{ idleTtlMs: -1 }, /idleTtlMs/],
      [{ maxIdleBytes: -1 }, /maxIdleBytes/],
    ];
    for (const [options, message] of cases) expectPoolError(() => new BufferPool(options), 'E_POOL_BAD_OPTION', message);
    // undefined means the default; Infinity and 0 are allowed where documented
    expect(() => new BufferPool({ maxBytes: undefined, idleTtlMs: Infinity, maxIdleBytes: 0, minClassBytes: 1 })).not.toThrow();
  });
});

describe('BufferPool reuse', () => {
  it('10 checkout/checkin rounds of one class: 1 fresh, 9 reused, the same memory every time', () => {
    const pool = new BufferPool();
    const first = pool.checkout(1000);
    pool.checkin(first);
    const ids = new Set([first.id]);
    for (let i = 1; i < 10; i++) {
      const b = pool.checkout(1000 + i * 100); // all in the 4096 class
      expect(b.buffer).toBe(first.buffer);
      ids.add(b.id);
      pool.checkin(b);
    }
    expect(ids.size).toBe(10); // a new lease id each time
    expect(pool.stats()).toEqual<BufferPoolStats>({
      leasedBytes: 0,
      idleBytes: 4096,
      totalBytes: 4096,
      highWaterBytes: 4096,
      leased: 0,
      idle: 1,
      fresh: 1,
      reused: 9,
      freed: 0,
    });
  });

  it('different classes do not share buffers', () => {
    const pool = new BufferPool();
    const small = pool.checkout(4096);
    pool.checkin(small);
    const big = pool.checkout(4097);
    expect(big.classBytes).toBe(5120);
    expect(big.buffer).not.toBe(small.buffer);
    expect(pool.stats()).toMatchObject({ fresh: 2, reused: 0, leasedBytes: 5120, idleBytes: 4096, totalBytes: 9216 });
    pool.checkin(big);
    expect(pool.checkout(10).buffer).toBe(small.buffer);
    expect(pool.checkout(5000).buffer).toBe(big.buffer);
    expect(pool.stats()).toMatchObject({ fresh: 2, reused: 2, idle: 0 });
  });

  it('reuses the most recently returned buffer of the class first', () => {
    const pool = new BufferPool();
    const a = pool.checkout(10);
    const b = pool.checkout(10);
    pool.checkin(a);
    pool.checkin(b);
    expect(pool.checkout(10).buffer).toBe(b.buffer);
    expect(pool.checkout(10).buffer).toBe(a.buffer);
    expect(pool.checkout(10).buffer).not.toBe(a.buffer);
    expect(pool.stats()).toMatchObject({ fresh: 3, reused: 2, leased: 3 });
  });
});

describe('BufferPool checkin errors', () => {
  it('a double checkin throws E_POOL_NOT_LEASED and changes nothing', () => {
    const pool = new BufferPool();
    const b = pool.checkout(10);
    pool.checkin(b);
    const before = pool.stats();
    expectPoolError(() => pool.checkin(b), 'E_POOL_NOT_LEASED', /checked in already/);
    expect(pool.stats()).toEqual(before);
  });

  it('a stale handle cannot check in the next lease of the same memory', () => {
    const pool = new BufferPool();
    const old = pool.checkout(10);
    pool.checkin(old);
    const current = pool.checkout(10);
    expect(current.buffer).toBe(old.buffer);
    expectPoolError(() => pool.checkin(old), 'E_POOL_NOT_LEASED');
    expect(pool.stats().leased).toBe(1);
    pool.checkin(current);
  });

  it('a buffer from another pool, or a forged handle, throws E_POOL_NOT_LEASED', () => {
    const pool = new BufferPool();
    const other = new BufferPool();
    const mine = pool.checkout(10);
    const foreign = other.checkout(10);
    expect(foreign.id).toBe(mine.id); // same id, different pool
    expectPoolError(() => pool.checkin(foreign), 'E_POOL_NOT_LEASED', /another pool/);
    const forged: PooledBuffer = { id: mine.id, buffer: new SharedArrayBuffer(4096), classBytes: 4096 };
    expectPoolError(() => pool.checkin(forged), 'E_POOL_NOT_LEASED');
    expect(pool.stats()).toMatchObject({ leased: 1, leasedBytes: 4096 });
    pool.checkin(mine);
    other.checkin(foreign);
  });
});

describe('BufferPool limits', () => {
  it('maxBytes counts leased + idle; a checkout over it throws E_POOL_FULL naming the numbers', () => {
    const pool = new BufferPool({ maxBytes: 16_384 });
    const a = pool.checkout(8192);
    const b = pool.checkout(4096);
    pool.checkin(b); // 8192 leased + 4096 idle = 12288
    const err = expectPoolError(() => pool.checkout(5000), 'E_POOL_FULL');
    expect(err.message).toBe(
      'checkout of 5000 bytes (class 5120) would hold 17408 bytes (8192 leased, 4096 idle), over maxBytes 16384: raise maxBytes, lower concurrency, or trim',
    );
    expect(pool.stats()).toMatchObject({ totalBytes: 12_288, fresh: 2, leased: 1, idle: 1 });
    // reuse never grows the pool, so it is allowed at the limit
    const c = pool.checkout(100);
    expect(c.buffer).toBe(b.buffer);
    pool.checkin(c);
    // trimming the idle buffer makes room, as the message says
    expect(pool.trim(true)).toBe(4096);
    const d = pool.checkout(5000);
    expect(pool.stats()).toMatchObject({ totalBytes: 13_312, highWaterBytes: 13_312 });
    pool.checkin(a);
    pool.checkin(d);
  });

  it('a single class larger than maxBytes says so', () => {
    const pool = new BufferPool({ maxBytes: 10_000 });
    expectPoolError(() => pool.checkout(10_000), 'E_POOL_FULL', /one buffer of class 10240 bytes is over maxBytes 10000: raise maxBytes/);
  });

  it('maxIdleBytes frees at checkin instead of keeping', () => {
    const pool = new BufferPool({ maxIdleBytes: 8192 });
    const bufs = [pool.checkout(10), pool.checkout(10), pool.checkout(10)];
    expect(pool.stats()).toMatchObject({ leasedBytes: 12_288, highWaterBytes: 12_288 });
    for (const b of bufs) pool.checkin(b);
    expect(pool.stats()).toMatchObject({ leasedBytes: 0, idleBytes: 8192, totalBytes: 8192, idle: 2, freed: 1, highWaterBytes: 12_288 });
    // the two kept are the first two returned
    expect(pool.checkout(10).buffer).toBe(bufs[1]?.buffer);
    expect(pool.checkout(10).buffer).toBe(bufs[0]?.buffer);

    const none = new BufferPool({ maxIdleBytes: 0 });
    none.checkin(none.checkout(10));
    expect(none.stats()).toMatchObject({ totalBytes: 0, idle: 0, freed: 1 });
    none.checkout(10);
    expect(none.stats()).toMatchObject({ fresh: 2, reused: 0 });
  });

  it('limitIdleTo: a checkout that needs a fresh buffer frees idle ones of other sizes past the room first (a 2 MiB partition behind 1 MiB ones held both: twice the budget)', () => {
    const MiB = 2 ** 20;
    const pool = new BufferPool();
    let room = 2 * MiB;
    pool.limitIdleTo(() => room);
    for (const b of [pool.checkout(MiB), pool.checkout(MiB)]) pool.checkin(b);
    expect(pool.stats()).toMatchObject({ idleBytes: 2 * MiB, highWaterBytes: 2 * MiB });
    // The budget now reserves the 2 MiB partition: no room beside it.
    room = 0;
    pool.checkout(2 * MiB);
    expect(pool.stats()).toMatchObject({ leasedBytes: 2 * MiB, idleBytes: 0, freed: 2, highWaterBytes: 2 * MiB });
    // A checkout an idle buffer serves frees nothing.
    const again = new BufferPool();
    again.limitIdleTo(() => 0);
    again.checkin(again.checkout(MiB));
    again.checkout(MiB);
    expect(again.stats()).toMatchObject({ reused: 1, freed: 0 });
  });

  it('trim frees only idle buffers older than idleTtlMs (by the injected clock); trim(true) frees all idle', () => {
    const clock = manualClock();
    const pool = new BufferPool({ idleTtlMs: 1000 }, clock.now);
    const leased = pool.checkout(10);
    const old = pool.checkout(10);
    const oldBig = pool.checkout(5000);
    const young = pool.checkout(10);
    pool.checkin(old); // t = 0
    pool.checkin(oldBig); // t = 0
    clock.advance(600);
    pool.checkin(young); // t = 600
    clock.advance(400); // t = 1000: the old ones are exactly idleTtlMs old, not older
    expect(pool.trim()).toBe(0);
    clock.advance(1); // t = 1001
    expect(pool.trim()).toBe(4096 + 5120);
    expect(pool.stats()).toMatchObject({ idle: 1, idleBytes: 4096, leased: 1, leasedBytes: 4096, freed: 2 });
    const again = pool.checkout(10);
    expect(again.buffer).toBe(young.buffer); // the young one survived
    pool.checkin(again); // idle again from t = 1001
    clock.advance(500);
    expect(pool.trim()).toBe(0);
    expect(pool.trim(true)).toBe(4096);
    expect(pool.stats()).toMatchObject({ idle: 0, idleBytes: 0, leased: 1, totalBytes: 4096, freed: 3 });
    expect(pool.trim(true)).toBe(0);
    pool.checkin(leased);
  });

  it('trim(true) frees everything idle without reading the clock; leased buffers stay', () => {
    let reads = 0;
    const pool = new BufferPool({}, () => {
      reads += 1;
      return 0;
    });
    const a = pool.checkout(10);
    const b = pool.checkout(10);
    pool.checkin(a);
    const readsBefore = reads;
    expect(pool.trim(true)).toBe(4096);
    expect(reads).toBe(readsBefore);
    expect(pool.stats()).toMatchObject({ leased: 1, idle: 0, totalBytes: 4096 });
    pool.checkin(b);
  });
});

// ─── property: random sequences keep the accounting consistent ───────────────────────────────

type Op = { kind: 'checkout'; bytes: number } | { kind: 'checkin'; pick: number } | { kind: 'trim'; all: boolean; advanceMs: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.integer({ min: 1, max: 70_000 }).map((bytes): Op => ({ kind: 'checkout', bytes })),
  fc.nat().map((pick): Op => ({ kind: 'checkin', pick })),
  fc.record({ all: fc.boolean(), advanceMs: fc.integer({ min: 0, max: 2000 }) }).map((o): Op => ({ kind: 'trim', ...o })),
);

const optionsArb: fc.Arbitrary<BufferPoolOptions> = fc.record({
  maxBytes: fc.oneof(fc.constant(Infinity), fc.integer({ min: 1, max: 400_000 })),
  minClassBytes: fc.constantFrom(1, 1024, 4096),
  idleTtlMs: fc.integer({ min: 0, max: 3000 }),
  maxIdleBytes: fc.oneof(fc.constant(Infinity), fc.integer({ min: 0, max: 200_000 })),
});

describe('BufferPool properties', () => {
  it('random checkout/checkin/trim sequences keep the stats invariants', () => {
    fc.assert(
      fc.property(optionsArb, fc.array(opArb, { maxLength: 60 }), (options, ops) => {
        const clock = manualClock();
        const pool = new BufferPool(options, clock.now);
        const maxBytes = options.maxBytes ?? Infinity;
        const maxIdleBytes = options.maxIdleBytes ?? Infinity;
        const held: PooledBuffer[] = [];
        let checkouts = 0;
        let prev = pool.stats();
        for (const op of ops) {
          if (op.kind === 'checkout') {
            const classBytes = pool.classOf(op.bytes);
            try {
              const b = pool.checkout(op.bytes);
              expect(b.classBytes).toBe(classBytes);
              expect(b.buffer.byteLength).toBe(classBytes);
              expect(held.some((h) => h.buffer === b.buffer)).toBe(false); // never leased twice at once
              held.push(b);
              checkouts += 1;
            } catch (e) {
              expect(e).toBeInstanceOf(BufferPoolError);
              expect((e as BufferPoolError).code).toBe('E_POOL_FULL');
              expect(prev.totalBytes + classBytes).toBeGreaterThan(maxBytes);
              expect(pool.stats()).toEqual(prev); // a refused checkout changes nothing
            }
          } else if (op.kind === 'checkin') {
            if (held.length === 0) continue;
            const [b] = held.splice(op.pick % held.length, 1);
            if (b === undefined) continue;
            pool.checkin(b);
            expectPoolError(() => pool.checkin(b), 'E_POOL_NOT_LEASED');
          } else {
            clock.advance(op.advanceMs);
            const freed = pool.trim(op.all);
            expect(freed).toBe(prev.idleBytes - pool.stats().idleBytes);
            if (op.all) expect(pool.stats().idle).toBe(0);
          }
          const s = pool.stats();
          expect(s.totalBytes).toBe(s.leasedBytes + s.idleBytes);
          expect(s.highWaterBytes).toBeGreaterThanOrEqual(s.totalBytes);
          expect(s.highWaterBytes).toBeGreaterThanOrEqual(prev.highWaterBytes);
          expect(s.totalBytes).toBeLessThanOrEqual(maxBytes);
          expect(s.idleBytes).toBeLessThanOrEqual(maxIdleBytes);
          expect(s.leased).toBe(held.length);
          expect(s.leasedBytes).toBe(held.reduce((sum, h) => sum + h.classBytes, 0));
          expect(s.fresh + s.reused).toBe(checkouts);
          expect(s.fresh - s.freed).toBe(s.leased + s.idle); // every buffer allocated is leased, idle or freed
          expect(s.idle === 0).toBe(s.idleBytes === 0);
          prev = s;
        }
      }),
      { seed: 7, numRuns: 200 },
    );
  });
});

// ─── sharing: the memory crosses views and threads without copying ───────────────────────────

describe('BufferPool buffers are shared memory', () => {
  it('a write through one Uint32Array view is visible through another view of the same buffer', () => {
    const pool = new BufferPool();
    const b = pool.checkout(64);
    const w = new Uint32Array(b.buffer);
    const r = new Uint32Array(b.buffer, 16, 4);
    w[5] = 0xdeadbeef;
    expect(r[1]).toBe(0xdeadbeef);
    pool.checkin(b);
    // a reused buffer is the same memory, contents included (the pool does not zero it)
    expect(new Uint32Array(pool.checkout(64).buffer)[5]).toBe(0xdeadbeef);
  });

  it('a worker thread writes into a pooled buffer and the main thread sees it, in both directions', async () => {
    const pool = new BufferPool();
    const lease = pool.checkout(64);
    const view = new Int32Array(lease.buffer);
    // The worker waits until the main thread raises flag [3] *after* the worker was created, reads
    // [2] (written then, too) and writes [0]. A copy made when posting would see neither.
    const code = `
      const { workerData, parentPort } = require('node:worker_threads');
      const a = new Int32Array(workerData.buffer);
      const r = Atomics.wait(a, 3, 0, 10000);
      Atomics.store(a, 0, Atomics.load(a, 2) * 2);
      parentPort.postMessage(r);
    `;
    const worker = new Worker(code, { eval: true, workerData: { buffer: lease.buffer } });
    try {
      const done = new Promise<unknown>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
        worker.once('exit', (c) => reject(new Error(`worker exited early with code ${c}`)));
      });
      Atomics.store(view, 2, 21);
      Atomics.store(view, 3, 1);
      Atomics.notify(view, 3);
      const waited = await done;
      expect(waited).not.toBe('timed-out');
      expect(Atomics.load(view, 0)).toBe(42);
    } finally {
      await worker.terminate();
    }
    pool.checkin(lease);
    expect(pool.stats()).toMatchObject({ leased: 0, idle: 1 });
  });
});
