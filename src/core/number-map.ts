/**
 * A map from exact numbers (integers below 2^53: item ids, queue keys) to values, in one
 * open-addressed table: linear probing, backward-shift deletion. A Map re-allocates its table every
 * few inserts and deletes (it reclaims a deleted entry only by rehashing), and the engine inserts
 * and deletes a key for every partition it makes and queues; this allocates only to grow or shrink.
 */
export class NumberMap<V> {
  /** NaN: an empty slot. Between an eighth and a half full (or the initial size). */
  private keys = new Float64Array(MIN_SLOTS).fill(NaN);
  private values: (V | undefined)[] = new Array<V | undefined>(MIN_SLOTS).fill(undefined);
  /** 32 − log2(slots): a key's home slot is the top bits of its hash. */
  private shift = 32 - Math.log2(MIN_SLOTS);
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(k: number): V | undefined {
    const i = this.find(k);
    return i < 0 ? undefined : this.values[i];
  }

  has(k: number): boolean {
    return this.find(k) >= 0;
  }

  set(k: number, v: V): void {
    let i = this.find(k);
    if (i < 0) {
      if (2 * (this.count + 1) > this.keys.length) this.resize(this.keys.length * 2);
      i = this.free(k);
      this.keys[i] = k;
      this.count++;
    }
    this.values[i] = v;
  }

  delete(k: number): boolean {
    let i = this.find(k);
    if (i < 0) return false;
    const { keys, values } = this;
    const mask = keys.length - 1;
    // Later keys of the run move back into the hole (so a look-up never needs a tombstone), each
    // unless its home lies cyclically in (hole, its slot].
    for (let j = (i + 1) & mask; ; j = (j + 1) & mask) {
      const s = keys[j] as number;
      if (Number.isNaN(s)) break;
      const h = this.home(s);
      if (j > i ? h <= i || h > j : h <= i && h > j) {
        keys[i] = s;
        values[i] = values[j];
        i = j;
      }
    }
    keys[i] = NaN;
    values[i] = undefined;
    this.count--;
    if (keys.length > MIN_SLOTS && 8 * this.count < keys.length) this.resize(keys.length / 2);
    return true;
  }

  /** Fibonacci hashing of the key's low and high 32 bits. */
  private home(k: number): number {
    return Math.imul((k | 0) ^ ((k / 0x1_0000_0000) | 0), 0x9e3779b1) >>> this.shift;
  }

  /** The slot holding k, or −1. */
  private find(k: number): number {
    const keys = this.keys;
    const mask = keys.length - 1;
    for (let i = this.home(k); ; i = (i + 1) & mask) {
      const s = keys[i] as number;
      if (s === k) return i;
      if (Number.isNaN(s)) return -1;
    }
  }

  /** The first empty slot of k's run. */
  private free(k: number): number {
    const keys = this.keys;
    const mask = keys.length - 1;
    let i = this.home(k);
    while (!Number.isNaN(keys[i] as number)) i = (i + 1) & mask;
    return i;
  }

  private resize(slots: number): void {
    const { keys, values } = this;
    this.keys = new Float64Array(slots).fill(NaN);
    this.values = new Array<V | undefined>(slots).fill(undefined);
    this.shift = 32 - Math.log2(slots);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i] as number;
      if (Number.isNaN(k)) continue;
      const j = this.free(k);
      this.keys[j] = k;
      this.values[j] = values[i];
    }
  }
}

const MIN_SLOTS = 16;
