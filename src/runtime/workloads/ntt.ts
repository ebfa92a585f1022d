/**
 * The `ntt-proof` demo workload: a stand-in for a zero-knowledge proving pipeline.
 *
 * CPU "synthesis" ({@link prepareInputs}) builds two polynomial coefficient vectors per partition;
 * the "device" ({@link provePartition}) evaluates both on the 2^logN-th roots of unity with forward
 * NTTs and multiplies the evaluations pointwise; {@link spotCheck} verifies a few output elements
 * against a Horner evaluation of freshly regenerated coefficients; {@link commitment} hashes the
 * outputs of all partitions of a job into one hex digest.
 *
 * Arithmetic is in the BabyBear field (p = 15·2^27 + 1) with plain JS numbers — no BigInt. A
 * product a·b of field elements is formed as `hi·(b·2^16 mod p) + lo·b`, where `hi`/`lo` are the
 * 16-bit halves of `a`: every intermediate stays below 2^48, so it is exact in a double, and
 * {@link reduce48} (a multiply by 1/p, a truncation and a subtraction; no `%`) brings it back into
 * [0, p). The NTT precomputes `ω·2^16 mod p` for every twiddle, so a butterfly needs one reduction.
 *
 * Pure computation: no threads, no I/O (apart from hashing with `node:crypto`).
 *
 * @module
 */
import { createHash } from 'node:crypto';

/** The BabyBear prime, p = 15·2^27 + 1 = 2013265921; p − 1 = 2^27·3·5. Elements are integers in [0, p). */
export const BABYBEAR_P = 2013265921;

/**
 * A generator of the whole multiplicative group of the BabyBear field (31 is a primitive root
 * mod p: 31^((p−1)/q) ≠ 1 for each prime q ∈ {2, 3, 5} dividing p − 1).
 */
export const BABYBEAR_GENERATOR = 31;

/** The largest logN for which a primitive 2^logN-th root of unity exists (2^27 divides p − 1). */
export const MAX_ROOT_LOG_N = 27;

/** The largest transform size {@link nttForward} and {@link nttInverse} accept, as log2 (2^20 points). */
export const MAX_NTT_LOG_N = 20;

const P = BABYBEAR_P;
/**
 * 1/p rounded *up* to a double. (The nearest double to 1/p lies below it; multiplying by
 * 1 + 2^-52 moves it one or two ulps up, so INV_P ≥ 1/p with relative excess < 2^-51.)
 */
const INV_P = (1 / P) * (1 + 2 ** -52);
const TWO_16 = 65536;

/**
 * x mod p for an integer 0 ≤ x < 2^48, without division or `%`.
 *
 * Write x = q·p + r with 0 ≤ r < p. Because INV_P ≥ 1/p and rounding is monotone, the computed
 * x·INV_P is ≥ q. It exceeds x/p by less than 2^17.1·2^-51 < 2^-33 (x/p < 2^17.1) plus half an
 * ulp (≤ 2^-36), while x/p ≤ q + 1 − 1/p < q + 1 − 2^-31; so it stays below q + 1 and truncating
 * gives exactly q (< 2^31, so `| 0` is safe). q·p < 2^48 is exact, hence the result is r ∈ [0, p).
 * The test suite also checks every x = k·p + {−1, 0, 1} below 2^48.
 */
export function reduce48(x: number): number {
  return x - ((x * INV_P) | 0) * P;
}

/**
 * (a·b) mod p for field elements a, b ∈ [0, p). Exact, using doubles only: `a` is split into
 * 16-bit halves and `b·2^16` is reduced first, so no intermediate reaches 2^48.
 */
export function mulMod(a: number, b: number): number {
  const b16 = reduce48(b * TWO_16);
  return reduce48((a >>> 16) * b16 + (a & 0xffff) * b);
}

/** (a + b) mod p for field elements a, b ∈ [0, p). */
export function addMod(a: number, b: number): number {
  const s = (a + b - P) | 0; // in [−p, p): fits an int32
  return s + ((s >> 31) & P);
}

/** (a − b) mod p for field elements a, b ∈ [0, p); the result is in [0, p). */
export function subMod(a: number, b: number): number {
  const d = (a - b) | 0; // in (−p, p)
  return d + ((d >> 31) & P);
}

/**
 * base^exp mod p by square-and-multiply, for a field element `base` ∈ [0, p) and a non-negative
 * safe integer `exp`. 0^0 is 1.
 *
 * @throws RangeError when `exp` is negative, fractional or above 2^53 − 1.
 */
export function powMod(base: number, exp: number): number {
  if (!Number.isSafeInteger(exp) || exp < 0) {
    throw new RangeError(`powMod: exponent must be a non-negative safe integer, got ${exp}`);
  }
  let result = 1;
  let b = base;
  let e = exp;
  while (e > 0) {
    // e may exceed 2^32, so halve with arithmetic rather than bit shifts.
    if (e % 2 === 1) result = mulMod(result, b);
    e = Math.floor(e / 2);
    if (e > 0) b = mulMod(b, b);
  }
  return result;
}

/**
 * A primitive 2^logN-th root of unity: ω = g^((p−1)/2^logN) with g = {@link BABYBEAR_GENERATOR}.
 * {@link nttForward} of size 2^logN evaluates at the powers of exactly this ω.
 *
 * @throws RangeError unless logN is an integer in [0, 27].
 */
export function rootOfUnity(logN: number): number {
  if (!Number.isInteger(logN) || logN < 0 || logN > MAX_ROOT_LOG_N) {
    throw new RangeError(`rootOfUnity: logN must be an integer in [0, ${MAX_ROOT_LOG_N}], got ${logN}`);
  }
  return powMod(BABYBEAR_GENERATOR, (P - 1) / 2 ** logN);
}

/** Precomputed twiddles for one transform size. */
interface Twiddles {
  /** For each stage with half-size m (1, 2, 4, … n/2): `w[m + j]` = ω_{2m}^j for j < m. Index 0 unused. */
  readonly w: Int32Array;
  /** `w16[i]` = w[i]·2^16 mod p, so a product with a twiddle needs a single reduction. */
  readonly w16: Int32Array;
  /** n^−1 mod p and n^−1·2^16 mod p, for the inverse transform's scaling. */
  readonly nInv: number;
  readonly nInv16: number;
}

const twiddleCache = new Map<number, Twiddles>();

function twiddles(logN: number): Twiddles {
  const cached = twiddleCache.get(logN);
  if (cached !== undefined) return cached;
  const n = 2 ** logN;
  const w = new Int32Array(n);
  const w16 = new Int32Array(n);
  for (let s = 1; s <= logN; s++) {
    const m = 2 ** (s - 1);
    const root = rootOfUnity(s); // primitive 2m-th root
    let x = 1;
    for (let j = 0; j < m; j++) {
      w[m + j] = x;
      w16[m + j] = reduce48(x * TWO_16);
      x = mulMod(x, root);
    }
  }
  const nInv = powMod(n, P - 2);
  const entry: Twiddles = { w, w16, nInv, nInv16: reduce48(nInv * TWO_16) };
  twiddleCache.set(logN, entry);
  return entry;
}

/** log2 of `a.length`, after checking that it is a power of two in [1, 2^20]. */
function checkedLogN(what: string, length: number): number {
  if (length < 1 || length > 2 ** MAX_NTT_LOG_N || (length & (length - 1)) !== 0) {
    throw new RangeError(
      `${what}: length must be a power of two between 1 and 2^${MAX_NTT_LOG_N} (${2 ** MAX_NTT_LOG_N}), got ${length}`,
    );
  }
  return 31 - Math.clz32(length);
}

/** In-place bit-reversal permutation of a power-of-two-length array. */
function bitReverse(a: Int32Array): void {
  const n = a.length;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; (j & bit) !== 0; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      const t = a[i]!;
      a[i] = a[j]!;
      a[j] = t;
    }
  }
}

/**
 * Iterative radix-2 decimation-in-time butterflies over a bit-reversed array.
 *
 * Works on an Int32Array view (elements < p < 2^31 have the same bits either way, and V8 keeps
 * int32 values unboxed). The modular add/subtract is branchless — `s += (s >> 31) & p` — because
 * the comparison's outcome is a coin flip on field data: with `s >= p ? s - p : s` branch
 * mispredictions made the transform about four times slower.
 */
function butterflies(a: Int32Array, tw: Twiddles): void {
  const n = a.length;
  const { w, w16 } = tw;
  // Stage m = 1: the only twiddle is 1.
  for (let k = 0; k + 1 < n; k += 2) {
    const u = a[k]!;
    const v = a[k + 1]!;
    let s = (u + v - P) | 0;
    s += (s >> 31) & P;
    let d = (u - v) | 0;
    d += (d >> 31) & P;
    a[k] = s;
    a[k + 1] = d;
  }
  for (let m = 2; m < n; m <<= 1) {
    // Block-outer, twiddle-inner: both `a` and the stage's twiddles are read sequentially.
    for (let base = 0; base < n; base += m << 1) {
      for (let j = 0; j < m; j++) {
        const k = base + j;
        const u = a[k]!;
        const x = a[k + m]!;
        // x·ω = hi(x)·(ω·2^16 mod p) + lo(x)·ω < 2^48, reduced as in reduce48.
        const t = (x >>> 16) * w16[m + j]! + (x & 0xffff) * w[m + j]!;
        const v = (t - ((t * INV_P) | 0) * P) | 0;
        let s = (u + v - P) | 0;
        s += (s >> 31) & P;
        let d = (u - v) | 0;
        d += (d >> 31) & P;
        a[k] = s;
        a[k + m] = d;
      }
    }
  }
}

/** An Int32Array over the same memory (field elements are below 2^31, so the bits agree). */
function int32View(a: Uint32Array): Int32Array {
  return new Int32Array(a.buffer, a.byteOffset, a.length);
}

/**
 * In-place forward NTT: `a[j] ← Σ_i a[i]·ω^(i·j)` with ω = {@link rootOfUnity}(log2 n), natural
 * order in and out. Elements must be in [0, p) (not checked: other values give garbage, not an
 * error). Twiddles are computed once per size and cached for the life of the module (at most
 * 8·2^logN bytes per size, 16 MiB for every size up to 2^20 together).
 *
 * @throws RangeError unless `a.length` is a power of two in [1, 2^20].
 */
export function nttForward(a: Uint32Array): void {
  const logN = checkedLogN('nttForward', a.length);
  if (logN === 0) return;
  const v = int32View(a);
  bitReverse(v);
  butterflies(v, twiddles(logN));
}

/**
 * In-place inverse NTT, the exact inverse of {@link nttForward}: `a[i] ← n^−1·Σ_j a[j]·ω^(−i·j)`.
 * Computed as a forward transform, a reversal of a[1..n−1] and a scaling by n^−1.
 *
 * @throws RangeError unless `a.length` is a power of two in [1, 2^20].
 */
export function nttInverse(a: Uint32Array): void {
  const logN = checkedLogN('nttInverse', a.length);
  if (logN === 0) return;
  const tw = twiddles(logN);
  const v = int32View(a);
  bitReverse(v);
  butterflies(v, tw);
  v.subarray(1).reverse(); // DFT with ω^−1 = DFT with ω read at −j mod n
  const { nInv, nInv16 } = tw;
  for (let i = 0; i < v.length; i++) {
    const x = v[i]!;
    v[i] = reduce48((x >>> 16) * nInv16 + (x & 0xffff) * nInv);
  }
}

/**
 * `out[i] ← a[i]·b[i] mod p` for every i. `out` may be `a` or `b` itself.
 *
 * @throws RangeError when the three lengths differ.
 */
export function pointwiseMul(a: Uint32Array, b: Uint32Array, out: Uint32Array): void {
  if (a.length !== b.length || out.length !== a.length) {
    throw new RangeError(
      `pointwiseMul: lengths must be equal, got a ${a.length}, b ${b.length}, out ${out.length}`,
    );
  }
  for (let i = 0; i < a.length; i++) out[i] = mulMod(a[i]!, b[i]!);
}

const GOLDEN = 0x9e3779b9;

/** MurmurHash3's 32-bit finalizer: a bijective avalanche mix of a 32-bit integer. */
function fmix32(h: number): number {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** Folds a safe integer (both 32-bit halves) into a running 32-bit hash. */
function absorb(h: number, v: number): number {
  const lo = v >>> 0;
  const hi = Math.floor(v / 4294967296) >>> 0;
  h = fmix32((h + GOLDEN) ^ lo);
  return fmix32((h + GOLDEN) ^ hi);
}

function checkInteger(what: string, name: string, v: number): void {
  if (!Number.isSafeInteger(v)) throw new RangeError(`${what}: ${name} must be a safe integer, got ${v}`);
}

/**
 * Fills `out` (length 2^logN) with deterministic pseudo-random field elements in [0, p), the
 * stream named by (seed, jobIndex, partition). The generator is the workload's own: a Weyl
 * sequence passed through MurmurHash3's finalizer (splitmix32 style), 31-bit draws with rejection
 * of values ≥ p so the elements are uniform. A shorter stream is a prefix of a longer one.
 *
 * @throws RangeError when an argument is not a safe integer or `out.length` ≠ 2^logN.
 */
export function witness(seed: number, jobIndex: number, partition: number, logN: number, out: Uint32Array): void {
  checkInteger('witness', 'seed', seed);
  checkInteger('witness', 'jobIndex', jobIndex);
  checkInteger('witness', 'partition', partition);
  checkLength('witness', logN, out);
  let state = absorb(absorb(absorb(0x2545f491, seed), jobIndex), partition);
  for (let i = 0; i < out.length; ) {
    state = (state + GOLDEN) >>> 0;
    const x = fmix32(state) >>> 1;
    if (x < P) out[i++] = x;
  }
}

function checkLength(what: string, logN: number, arr: Uint32Array, name = 'out'): void {
  if (!Number.isInteger(logN) || logN < 0 || logN > MAX_NTT_LOG_N) {
    throw new RangeError(`${what}: logN must be an integer in [0, ${MAX_NTT_LOG_N}], got ${logN}`);
  }
  if (arr.length !== 2 ** logN) {
    throw new RangeError(`${what}: ${name} must have length 2^${logN} = ${2 ** logN}, got ${arr.length}`);
  }
}

/**
 * The CPU "synthesis" of a partition: fills `a` and `b` (each of length 2^logN) with the
 * coefficients of its two polynomials — {@link witness} streams `2·partition` and `2·partition + 1`.
 *
 * @throws RangeError when a length is not 2^logN or an argument is not a safe integer.
 */
export function prepareInputs(
  seed: number,
  jobIndex: number,
  partition: number,
  logN: number,
  a: Uint32Array,
  b: Uint32Array,
): void {
  checkInteger('prepareInputs', 'partition', partition);
  checkLength('prepareInputs', logN, a, 'a');
  checkLength('prepareInputs', logN, b, 'b');
  witness(seed, jobIndex, partition * 2, logN, a);
  witness(seed, jobIndex, partition * 2 + 1, logN, b);
}

/**
 * The "device" work for one partition: forward NTTs of `coeffsA` and `coeffsB`, **in place** (both
 * arrays are overwritten with their evaluations at ω^0 … ω^(n−1)), then their pointwise product
 * into `out`, so `out[j] = A(ω^j)·B(ω^j)`. `out` may be one of the inputs.
 *
 * @throws RangeError when the lengths differ or are not a power of two in [1, 2^20].
 */
export function provePartition(coeffsA: Uint32Array, coeffsB: Uint32Array, out: Uint32Array): void {
  if (coeffsB.length !== coeffsA.length || out.length !== coeffsA.length) {
    throw new RangeError(
      `provePartition: lengths must be equal, got coeffsA ${coeffsA.length}, coeffsB ${coeffsB.length}, out ${out.length}`,
    );
  }
  nttForward(coeffsA);
  nttForward(coeffsB);
  pointwiseMul(coeffsA, coeffsB, out);
}

/**
 * The polynomial Σ coeffs[i]·x^i at the field element x, by Horner's rule (the reference the spot
 * checks compare against). An empty vector evaluates to 0.
 */
export function evaluateAt(coeffs: Uint32Array, x: number): number {
  const x16 = reduce48(x * TWO_16);
  let acc = 0;
  for (let i = coeffs.length - 1; i >= 0; i--) {
    // acc·x + c < 2^46 + 2^47 + 2^31 < 2^48: one reduction.
    acc = reduce48((acc >>> 16) * x16 + (acc & 0xffff) * x + coeffs[i]!);
  }
  return acc;
}

/**
 * Verifies `out[j] = A(ω^j)·B(ω^j)` at each of `indices`, where A and B are regenerated with
 * {@link prepareInputs}(seed, jobIndex, partition, logN) and evaluated by Horner's rule —
 * independent of the NTT code. Costs O(2^logN · indices.length).
 *
 * @returns true when every checked element matches.
 * @throws RangeError when `out.length` ≠ 2^logN or an index is not an integer in [0, 2^logN).
 */
export function spotCheck(
  seed: number,
  jobIndex: number,
  partition: number,
  logN: number,
  out: Uint32Array,
  indices: readonly number[],
): boolean {
  checkLength('spotCheck', logN, out);
  const n = out.length;
  for (const j of indices) {
    if (!Number.isInteger(j) || j < 0 || j >= n) {
      throw new RangeError(`spotCheck: index must be an integer in [0, ${n}), got ${j}`);
    }
  }
  const a = new Uint32Array(n);
  const b = new Uint32Array(n);
  prepareInputs(seed, jobIndex, partition, logN, a, b);
  return indices.every((j) => out[j] === productAt(a, b, logN, j));
}

/**
 * A(ω^j)·B(ω^j) for the 2^logN-point domain, by Horner's rule on the coefficients: the reference
 * value for position j of {@link provePartition}'s output, independent of the NTT code.
 */
export function productAt(a: Uint32Array, b: Uint32Array, logN: number, j: number): number {
  const x = powMod(rootOfUnity(logN), j);
  return mulMod(evaluateAt(a, x), evaluateAt(b, x));
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * SHA-256 (hex) over the outputs in order. Each output contributes its length as a 4-byte
 * little-endian integer, then its elements as 4-byte little-endian integers, so the digest is the
 * same on every host and different splits of the same elements give different digests.
 */
export function commitment(outputs: readonly Uint32Array[]): string {
  const hash = createHash('sha256');
  const header = new DataView(new ArrayBuffer(4));
  for (const o of outputs) {
    header.setUint32(0, o.length, true);
    hash.update(new Uint8Array(header.buffer));
    if (LITTLE_ENDIAN) {
      hash.update(new Uint8Array(o.buffer, o.byteOffset, o.byteLength));
    } else {
      const bytes = new DataView(new ArrayBuffer(o.byteLength));
      for (let i = 0; i < o.length; i++) bytes.setUint32(i * 4, o[i]!, true);
      hash.update(new Uint8Array(bytes.buffer));
    }
  }
  return hash.digest('hex');
}
