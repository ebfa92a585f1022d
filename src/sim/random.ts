import { uniformFloat64 } from 'pure-rand/distribution/uniformFloat64';
import { xoroshiro128plusFromState } from 'pure-rand/generator/xoroshiro128plus';

/** Murmur3's 32-bit finalizer: spreads nearby integers over the whole state space. */
function mix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) | 0;
}

/**
 * A seeded source of uniform and normal variates (xoroshiro128+ from pure-rand). `stream`
 * selects an independent sequence for the same seed (one per simulated item, so every pacer
 * sees the same draws for the same item).
 */
export class Rng {
  private readonly gen;
  private spare = NaN;

  constructor(seed: number, stream = 0) {
    const base = mix32(mix32(seed | 0) ^ Math.imul(stream | 0, 0x9e3779b9));
    const s0 = mix32(base + 0x632be5ab);
    const s1 = mix32(base + 0xc657cb56);
    const s2 = mix32(base + 0x2983b101);
    const s3 = mix32(base + 0x8caf96ac);
    // An all-zero state would only ever give zeros.
    this.gen = xoroshiro128plusFromState([(s0 | s1 | s2 | s3) === 0 ? 1 : s0, s1, s2, s3]);
  }

  /** Uniform in [0, 1). */
  uniform(): number {
    return uniformFloat64(this.gen);
  }

  /** Standard normal (Box–Muller, both variates used). */
  normal(): number {
    if (!Number.isNaN(this.spare)) {
      const v = this.spare;
      this.spare = NaN;
      return v;
    }
    let u = 0;
    while (u === 0) u = this.uniform();
    const v = this.uniform();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** Exponential with the given mean. */
  exponential(mean: number): number {
    return -mean * Math.log(1 - this.uniform());
  }
}
