import { shown } from './checks.js';
import { StokerError } from './errors.js';

/**
 * A memory budget in bytes. The dispatcher asks it only for the head of the priority queue,
 * so grants follow queue order (no barging); every release happens inside an engine step that
 * then re-runs the dispatcher, so a freed byte can never be missed (no lost wake-ups).
 */
export class MemoryBudget {
  private usedBytes = 0;
  private heldBytes = 0;
  private peakBytes = 0;

  /** @param totalBytes the whole budget; `Infinity` for none. */
  constructor(readonly totalBytes: number) {
    if (typeof totalBytes !== 'number' || !(totalBytes >= 0)) {
      throw new StokerError('E_INVALID_OPTION', `budgetBytes must be a number ≥ 0 or Infinity (got ${shown(totalBytes)})`);
    }
  }

  get used(): number {
    return this.usedBytes;
  }

  /** Bytes the driver holds outside reservations (idle pooled buffers): they count against the budget. */
  get held(): number {
    return this.heldBytes;
  }

  get free(): number {
    return this.totalBytes - this.usedBytes - this.heldBytes;
  }

  /** Sets the bytes held outside reservations (see {@link held}). */
  setHeld(bytes: number): void {
    if (!(bytes >= 0) || !Number.isFinite(bytes)) throw new StokerError('E_INVALID_OPTION', `held memory must be a finite number of bytes ≥ 0 (got ${String(bytes)})`);
    this.heldBytes = bytes;
    this.peakBytes = Math.max(this.peakBytes, this.usedBytes + bytes);
  }

  /** Peak of reserved + held bytes. */
  get peak(): number {
    return this.peakBytes;
  }

  /** Whether a request of this size can ever be granted. */
  fits(bytes: number): boolean {
    return bytes <= this.totalBytes;
  }

  /** Grants `bytes` if they are free now; returns whether it did. */
  tryReserve(bytes: number): boolean {
    if (!(bytes >= 0)) throw new StokerError('E_INVALID_OPTION', `a reservation must be a number of bytes ≥ 0 (got ${String(bytes)})`);
    if (bytes > this.totalBytes - this.usedBytes - this.heldBytes) return false;
    this.usedBytes += bytes;
    this.peakBytes = Math.max(this.peakBytes, this.usedBytes + this.heldBytes);
    return true;
  }

  release(bytes: number): void {
    if (!(bytes >= 0) || bytes > this.usedBytes) {
      throw new StokerError('E_INVALID_OPTION', `budget release of ${bytes} bytes exceeds the ${this.usedBytes} bytes in use: a reservation was released twice`);
    }
    this.usedBytes -= bytes;
  }
}
