import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  BABYBEAR_GENERATOR,
  BABYBEAR_P,
  addMod,
  commitment,
  evaluateAt,
  mulMod,
  nttForward,
  nttInverse,
  pointwiseMul,
  powMod,
  prepareInputs,
  provePartition,
  reduce48,
  rootOfUnity,
  spotCheck,
  subMod,
  witness,
} from '../../src/runtime/workloads/ntt.js';

const P = BABYBEAR_P;
const PB = BigInt(P);

/** A small seeded generator for test data (xorshift32), independent of the workload's own. */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
}

/** A uniform-ish field element (slight bias is irrelevant here). */
function randomElement(next: () => number): number {
  return next() % P;
}

function randomVector(n: number, seed: number): Uint32Array {
  const next = rng(seed);
  const v = new Uint32Array(n);
  for (let i = 0; i < n; i++) v[i] = randomElement(next);
  return v;
}

function powBig(base: bigint, exp: bigint): bigint {
  let r = 1n;
  let b = base % PB;
  let e = exp;
  while (e > 0n) {
    if (e & 1n) r = (r * b) % PB;
    b = (b * b) % PB;
    e >>= 1n;
  }
  return r;
}

function naiveDft(a: Uint32Array, omega: number): Uint32Array {
  const n = a.length;
  const out = new Uint32Array(n);
  const w = BigInt(omega);
  for (let j = 0; j < n; j++) {
    let acc = 0n;
    for (let i = 0; i < n; i++) acc += BigInt(a[i]!) * powBig(w, BigInt(i * j));
    out[j] = Number(acc % PB);
  }
  return out;
}

const EDGES = [0, 1, 2, 3, 65535, 65536, 65537, 2 ** 30, 2 ** 31 - 1 - 2 ** 27, P - 65536, P - 2, P - 1];

describe('BabyBear constants', () => {
  it('p = 15·2^27 + 1 and p is prime', () => {
    expect(BABYBEAR_P).toBe(15 * 2 ** 27 + 1);
    expect(BABYBEAR_P).toBe(2013265921);
    let divisor = 0;
    for (let d = 2; d * d <= P && divisor === 0; d++) if (P % d === 0) divisor = d;
    expect(divisor).toBe(0);
  });

  it('the generator generates the whole multiplicative group (p − 1 = 2^27·3·5)', () => {
    expect(2 ** 27 * 3 * 5).toBe(P - 1);
    for (const q of [2, 3, 5]) {
      expect(powMod(BABYBEAR_GENERATOR, (P - 1) / q), `g^((p−1)/${q})`).not.toBe(1);
      expect(powBig(BigInt(BABYBEAR_GENERATOR), (PB - 1n) / BigInt(q))).not.toBe(1n);
    }
    expect(powMod(BABYBEAR_GENERATOR, P - 1)).toBe(1);
  });
});

describe('field arithmetic', () => {
  it('reduce48 is exact at every multiple of p (±1) below 2^48', () => {
    const kMax = Math.floor((2 ** 48 - 2) / P);
    let bad = 0;
    for (let k = 0; k <= kMax; k++) {
      const x = k * P;
      if (reduce48(x) !== 0) bad++;
      if (reduce48(x + 1) !== 1) bad++;
      if (k > 0 && reduce48(x - 1) !== P - 1) bad++;
    }
    expect(bad).toBe(0);
    expect(reduce48(2 ** 48 - 1)).toBe((2 ** 48 - 1) % P);
  });

  it('reduce48 matches % on random values below 2^48', () => {
    const next = rng(7);
    for (let i = 0; i < 20000; i++) {
      const x = (next() >>> 16) * 2 ** 32 + next();
      expect(reduce48(x)).toBe(x % P);
    }
  });

  it('mulMod, addMod, subMod match BigInt on seeded random pairs and edge values', () => {
    const next = rng(42);
    const pairs: [number, number][] = [];
    for (const a of EDGES) for (const b of EDGES) pairs.push([a, b]);
    for (let i = 0; i < 5000; i++) pairs.push([randomElement(next), randomElement(next)]);
    for (const [a, b] of pairs) {
      const A = BigInt(a);
      const B = BigInt(b);
      expect(mulMod(a, b), `${a}·${b}`).toBe(Number((A * B) % PB));
      expect(addMod(a, b), `${a}+${b}`).toBe(Number((A + B) % PB));
      expect(subMod(a, b), `${a}−${b}`).toBe(Number((((A - B) % PB) + PB) % PB));
    }
  });

  it('powMod matches BigInt, including exponents beyond 2^32', () => {
    const next = rng(3);
    const exps = [0, 1, 2, P - 2, P - 1, P, 2 ** 32 + 5, 2 ** 40 + 3, Number.MAX_SAFE_INTEGER];
    for (let i = 0; i < 200; i++) exps.push(next());
    for (const base of [...EDGES, randomElement(next), randomElement(next)]) {
      for (const e of exps) {
        expect(powMod(base, e), `${base}^${e}`).toBe(Number(powBig(BigInt(base), BigInt(e))));
      }
    }
    expect(powMod(0, 0)).toBe(1);
    expect(mulMod(12345, powMod(12345, P - 2))).toBe(1); // Fermat inverse
  });

  it('powMod rejects negative and fractional exponents', () => {
    expect(() => powMod(2, -1)).toThrow(RangeError);
    expect(() => powMod(2, 1.5)).toThrow(/exponent.*1\.5/);
  });
});

describe('rootOfUnity', () => {
  it('is a primitive 2^logN-th root for every logN in [0, 27]', () => {
    expect(rootOfUnity(0)).toBe(1);
    for (let logN = 1; logN <= 27; logN++) {
      const w = rootOfUnity(logN);
      expect(powMod(w, 2 ** logN), `ω^(2^${logN})`).toBe(1);
      expect(powMod(w, 2 ** (logN - 1)), `ω^(2^${logN - 1})`).toBe(P - 1);
    }
  });

  it('consecutive roots square into each other', () => {
    for (let logN = 1; logN <= 27; logN++) expect(mulMod(rootOfUnity(logN), rootOfUnity(logN))).toBe(rootOfUnity(logN - 1));
  });

  it('rejects logN outside [0, 27]', () => {
    expect(() => rootOfUnity(28)).toThrow(/got 28/);
    expect(() => rootOfUnity(-1)).toThrow(RangeError);
    expect(() => rootOfUnity(2.5)).toThrow(RangeError);
  });
});

describe('NTT', () => {
  it.each([1, 2, 3, 4, 6])('forward matches a naive DFT for n = 2^%i', (logN) => {
    const x = randomVector(2 ** logN, 100 + logN);
    const expected = naiveDft(x, rootOfUnity(logN));
    nttForward(x);
    expect(Array.from(x)).toEqual(Array.from(expected));
  });

  it('forward matches a naive DFT on edge values (all p − 1, a unit impulse)', () => {
    const ones = new Uint32Array(16).fill(P - 1);
    const expected = naiveDft(ones, rootOfUnity(4));
    nttForward(ones);
    expect(Array.from(ones)).toEqual(Array.from(expected));
    const impulse = new Uint32Array(64);
    impulse[1] = 1;
    nttForward(impulse);
    const w = rootOfUnity(6);
    for (let j = 0; j < 64; j++) expect(impulse[j]).toBe(powMod(w, j));
  });

  it('a length-1 transform is the identity', () => {
    const a = Uint32Array.of(123);
    nttForward(a);
    expect(a[0]).toBe(123);
    nttInverse(a);
    expect(a[0]).toBe(123);
  });

  it('inverse(forward(x)) = x and forward(inverse(x)) = x for sizes 2 … 2^16', () => {
    for (let logN = 1; logN <= 16; logN++) {
      const x = randomVector(2 ** logN, logN);
      const y = x.slice();
      nttForward(y);
      if (logN > 2) expect(Array.from(y)).not.toEqual(Array.from(x));
      nttInverse(y);
      expect(Array.from(y), `n = 2^${logN}`).toEqual(Array.from(x));
      nttInverse(y);
      nttForward(y);
      expect(Array.from(y), `n = 2^${logN}`).toEqual(Array.from(x));
    }
  });

  it('round-trips the largest size, 2^20', () => {
    const x = randomVector(2 ** 20, 20);
    const y = x.slice();
    nttForward(y);
    nttInverse(y);
    expect(y.every((v, i) => v === x[i])).toBe(true);
  });

  it('works on a subarray view without touching its neighbours', () => {
    const backing = randomVector(48, 9);
    const before = backing.slice();
    const view = backing.subarray(8, 40);
    const expected = naiveDft(view.slice(), rootOfUnity(5));
    nttForward(view);
    expect(Array.from(view)).toEqual(Array.from(expected));
    expect(Array.from(backing.subarray(0, 8))).toEqual(Array.from(before.subarray(0, 8)));
    expect(Array.from(backing.subarray(40))).toEqual(Array.from(before.subarray(40)));
  });

  it('is linear: F(α·x + y) = α·F(x) + F(y)', () => {
    const n = 256;
    const x = randomVector(n, 1);
    const y = randomVector(n, 2);
    const alpha = 987654321;
    const combo = new Uint32Array(n);
    for (let i = 0; i < n; i++) combo[i] = addMod(mulMod(alpha, x[i]!), y[i]!);
    nttForward(x);
    nttForward(y);
    nttForward(combo);
    for (let i = 0; i < n; i++) expect(combo[i]).toBe(addMod(mulMod(alpha, x[i]!), y[i]!));
  });

  it('pointwise products of evaluations are cyclic convolutions of coefficients', () => {
    const n = 32;
    const a = randomVector(n, 11);
    const b = randomVector(n, 12);
    const conv = new Uint32Array(n);
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) conv[(i + j) % n] = addMod(conv[(i + j) % n]!, mulMod(a[i]!, b[j]!));
    }
    nttForward(a);
    nttForward(b);
    pointwiseMul(a, b, a);
    nttInverse(a);
    expect(Array.from(a)).toEqual(Array.from(conv));
  });

  it.each([0, 3, 6, 12, 1000, 2 ** 21])('rejects length %i with an error naming it', (len) => {
    const a = new Uint32Array(len);
    expect(() => nttForward(a)).toThrow(RangeError);
    expect(() => nttForward(a)).toThrow(new RegExp(`nttForward: length must be a power of two .*got ${len}$`));
    expect(() => nttInverse(a)).toThrow(new RegExp(`nttInverse: .*got ${len}$`));
  });
});

describe('pointwiseMul', () => {
  it('multiplies elementwise, also in place', () => {
    const a = randomVector(100, 5);
    const b = randomVector(100, 6);
    const out = new Uint32Array(100);
    pointwiseMul(a, b, out);
    for (let i = 0; i < 100; i++) expect(out[i]).toBe(Number((BigInt(a[i]!) * BigInt(b[i]!)) % PB));
    pointwiseMul(a, b, b);
    expect(Array.from(b)).toEqual(Array.from(out));
  });

  it('rejects mismatched lengths, naming them', () => {
    expect(() => pointwiseMul(new Uint32Array(4), new Uint32Array(4), new Uint32Array(3))).toThrow(
      'pointwiseMul: lengths must be equal, got a 4, b 4, out 3',
    );
  });
});

describe('witness and prepareInputs', () => {
  it('is deterministic, in [0, p), and spread over the whole field', () => {
    const a = new Uint32Array(4096);
    const b = new Uint32Array(4096);
    witness(1, 2, 3, 12, a);
    witness(1, 2, 3, 12, b);
    expect(Array.from(a)).toEqual(Array.from(b));
    expect(a.every((v) => v < P)).toBe(true);
    const high = a.filter((v) => v >= P / 2).length;
    expect(high).toBeGreaterThan(1800);
    expect(high).toBeLessThan(2300);
    expect(new Set(a).size).toBeGreaterThan(4090);
  });

  it('each of seed, jobIndex and partition selects a different stream', () => {
    const streams = [
      [1, 2, 3],
      [2, 2, 3],
      [1, 3, 3],
      [1, 2, 4],
      [3, 2, 1],
      [1 + 2 ** 32, 2, 3],
      [-1, 2, 3],
    ];
    const seen = new Set<string>();
    for (const [s, j, p] of streams) {
      const out = new Uint32Array(16);
      witness(s!, j!, p!, 4, out);
      seen.add(Array.from(out).join(','));
    }
    expect(seen.size).toBe(streams.length);
  });

  it('a shorter stream is a prefix of a longer one', () => {
    const small = new Uint32Array(8);
    const large = new Uint32Array(64);
    witness(9, 0, 1, 3, small);
    witness(9, 0, 1, 6, large);
    expect(Array.from(small)).toEqual(Array.from(large.subarray(0, 8)));
  });

  it('rejects a length that is not 2^logN and non-integer arguments', () => {
    expect(() => witness(1, 0, 0, 4, new Uint32Array(15))).toThrow('witness: out must have length 2^4 = 16, got 15');
    expect(() => witness(1.5, 0, 0, 0, new Uint32Array(1))).toThrow(/seed must be a safe integer, got 1\.5/);
    expect(() => witness(1, 0, 0, 21, new Uint32Array(1))).toThrow(/logN must be an integer in \[0, 20\], got 21/);
  });

  it('prepareInputs fills A and B from streams 2·partition and 2·partition + 1', () => {
    const a = new Uint32Array(32);
    const b = new Uint32Array(32);
    prepareInputs(5, 7, 3, 5, a, b);
    const ea = new Uint32Array(32);
    const eb = new Uint32Array(32);
    witness(5, 7, 6, 5, ea);
    witness(5, 7, 7, 5, eb);
    expect(Array.from(a)).toEqual(Array.from(ea));
    expect(Array.from(b)).toEqual(Array.from(eb));
    expect(() => prepareInputs(5, 7, 3, 5, a, new Uint32Array(16))).toThrow(/b must have length 2\^5 = 32, got 16/);
  });
});

describe('evaluateAt', () => {
  it('matches a BigInt Horner evaluation', () => {
    const c = randomVector(200, 77);
    for (const x of [0, 1, 2, P - 1, 123456789]) {
      let acc = 0n;
      for (let i = c.length - 1; i >= 0; i--) acc = (acc * BigInt(x) + BigInt(c[i]!)) % PB;
      expect(evaluateAt(c, x)).toBe(Number(acc));
    }
    expect(evaluateAt(new Uint32Array(0), 5)).toBe(0);
    expect(evaluateAt(Uint32Array.of(P - 1), 5)).toBe(P - 1);
  });
});

describe('provePartition and spotCheck', () => {
  it('out[j] = A(ω^j)·B(ω^j) for every j, and A and B are overwritten with their NTTs', () => {
    const logN = 5;
    const n = 2 ** logN;
    const a = new Uint32Array(n);
    const b = new Uint32Array(n);
    prepareInputs(1, 0, 2, logN, a, b);
    const a0 = a.slice();
    const b0 = b.slice();
    const out = new Uint32Array(n);
    provePartition(a, b, out);
    const w = rootOfUnity(logN);
    for (let j = 0; j < n; j++) {
      const x = powMod(w, j);
      expect(a[j]).toBe(evaluateAt(a0, x));
      expect(b[j]).toBe(evaluateAt(b0, x));
      expect(out[j]).toBe(mulMod(evaluateAt(a0, x), evaluateAt(b0, x)));
    }
  });

  it('rejects mismatched lengths before mutating anything', () => {
    const a = Uint32Array.of(1, 2, 3, 4);
    expect(() => provePartition(a, new Uint32Array(4), new Uint32Array(8))).toThrow(
      'provePartition: lengths must be equal, got coeffsA 4, coeffsB 4, out 8',
    );
    expect(Array.from(a)).toEqual([1, 2, 3, 4]);
    expect(() => provePartition(new Uint32Array(6), new Uint32Array(6), new Uint32Array(6))).toThrow(/got 6/);
  });

  const seed = 2024;
  const jobIndex = 3;
  const partition = 4;
  const logN = 10;
  const n = 2 ** logN;
  function proven(): Uint32Array {
    const a = new Uint32Array(n);
    const b = new Uint32Array(n);
    const out = new Uint32Array(n);
    prepareInputs(seed, jobIndex, partition, logN, a, b);
    provePartition(a, b, out);
    return out;
  }
  const indices = [0, 1, 517, n - 1];

  it('passes a correct output', () => {
    expect(spotCheck(seed, jobIndex, partition, logN, proven(), indices)).toBe(true);
    expect(spotCheck(seed, jobIndex, partition, logN, proven(), [])).toBe(true);
  });

  it('fails when a checked element is corrupted, at each checked index', () => {
    for (const j of indices) {
      const out = proven();
      out[j] = addMod(out[j]!, 1);
      expect(spotCheck(seed, jobIndex, partition, logN, out, indices), `index ${j}`).toBe(false);
    }
  });

  it('is only a spot check: an unchecked corruption goes unnoticed', () => {
    const out = proven();
    out[2] = addMod(out[2]!, 1);
    expect(spotCheck(seed, jobIndex, partition, logN, out, indices)).toBe(true);
  });

  it('fails for another seed, job or partition', () => {
    const out = proven();
    expect(spotCheck(seed + 1, jobIndex, partition, logN, out, indices)).toBe(false);
    expect(spotCheck(seed, jobIndex + 1, partition, logN, out, indices)).toBe(false);
    expect(spotCheck(seed, jobIndex, partition + 1, logN, out, indices)).toBe(false);
  });

  it('rejects bad indices and lengths', () => {
    const out = proven();
    expect(() => spotCheck(seed, jobIndex, partition, logN, out, [n])).toThrow(`index must be an integer in [0, ${n}), got ${n}`);
    expect(() => spotCheck(seed, jobIndex, partition, logN, out, [-1])).toThrow(RangeError);
    expect(() => spotCheck(seed, jobIndex, partition, logN + 1, out, [0])).toThrow(/out must have length 2\^11 = 2048, got 1024/);
  });
});

describe('commitment', () => {
  it('is SHA-256 over (length, elements) little-endian, in order', () => {
    expect(commitment([])).toBe(createHash('sha256').digest('hex'));
    const expected = createHash('sha256')
      .update(Uint8Array.of(2, 0, 0, 0, 1, 0, 0, 0, 0x04, 0x03, 0x02, 0x01))
      .update(Uint8Array.of(0, 0, 0, 0))
      .digest('hex');
    expect(commitment([Uint32Array.of(1, 0x01020304), new Uint32Array(0)])).toBe(expected);
  });

  it('is deterministic and depends on every element, the order and the split', () => {
    const outs = [randomVector(1024, 1), randomVector(1024, 2)];
    const c = commitment(outs);
    expect(c).toMatch(/^[0-9a-f]{64}$/);
    expect(commitment(outs.map((o) => o.slice()))).toBe(c);
    const changed = outs.map((o) => o.slice());
    changed[1]![1000] = addMod(changed[1]![1000]!, 1);
    expect(commitment(changed)).not.toBe(c);
    expect(commitment([outs[1]!, outs[0]!])).not.toBe(c);
    expect(commitment([Uint32Array.of(1, 2), Uint32Array.of(3)])).not.toBe(commitment([Uint32Array.of(1), Uint32Array.of(2, 3)]));
  });

  it('hashes only the view, not the rest of its buffer', () => {
    const backing = Uint32Array.of(9, 1, 2, 9);
    expect(commitment([backing.subarray(1, 3)])).toBe(commitment([Uint32Array.of(1, 2)]));
  });
});
