import { describe, expect, it } from 'vitest';
import { MemoryBudget } from '../../src/core/index.js';
import { expectStokerError } from './helpers.js';

describe('MemoryBudget', () => {
  it('starts empty: used 0, free = total, peak 0', () => {
    const b = new MemoryBudget(1000);
    expect(b.totalBytes).toBe(1000);
    expect(b.used).toBe(0);
    expect(b.free).toBe(1000);
    expect(b.peak).toBe(0);
  });

  it('tryReserve grants while bytes are free and refuses without changing anything otherwise', () => {
    const b = new MemoryBudget(1000);
    expect(b.tryReserve(600)).toBe(true);
    expect(b.used).toBe(600);
    expect(b.free).toBe(400);
    expect(b.tryReserve(401)).toBe(false);
    expect(b.used).toBe(600);
    expect(b.tryReserve(400)).toBe(true); // exactly the free bytes
    expect(b.used).toBe(1000);
    expect(b.free).toBe(0);
    expect(b.tryReserve(1)).toBe(false);
    expect(b.tryReserve(0)).toBe(true); // a zero reservation always fits
    expect(b.used).toBe(1000);
  });

  it('release returns bytes; peak remembers the high-water mark', () => {
    const b = new MemoryBudget(1000);
    b.tryReserve(300);
    b.tryReserve(500);
    expect(b.peak).toBe(800);
    b.release(500);
    expect(b.used).toBe(300);
    expect(b.free).toBe(700);
    expect(b.peak).toBe(800);
    b.tryReserve(100);
    expect(b.peak).toBe(800);
    b.tryReserve(600);
    expect(b.peak).toBe(1000);
    b.release(1000);
    expect(b.used).toBe(0);
    expect(b.peak).toBe(1000);
  });

  it('a refused request does not move the peak', () => {
    const b = new MemoryBudget(100);
    b.tryReserve(60);
    expect(b.tryReserve(50)).toBe(false);
    expect(b.peak).toBe(60);
  });

  it('releasing more than is used throws E_INVALID_OPTION and keeps the count', () => {
    const b = new MemoryBudget(1000);
    b.tryReserve(100);
    expectStokerError(() => b.release(101), 'E_INVALID_OPTION', /released twice/);
    expect(b.used).toBe(100);
    b.release(100);
    expectStokerError(() => b.release(1), 'E_INVALID_OPTION');
    expect(b.used).toBe(0);
  });

  it('a negative release throws', () => {
    const b = new MemoryBudget(1000);
    b.tryReserve(100);
    expectStokerError(() => b.release(-1), 'E_INVALID_OPTION');
    expect(b.used).toBe(100);
  });

  it('a NaN reservation or release throws E_INVALID_OPTION and changes nothing', () => {
    const b = new MemoryBudget(1000);
    b.tryReserve(100);
    expectStokerError(() => b.tryReserve(NaN), 'E_INVALID_OPTION', /NaN/);
    expect(b.used).toBe(100);
    expect(b.free).toBe(900);
    expect(b.peak).toBe(100);
    expectStokerError(() => b.release(NaN), 'E_INVALID_OPTION', /NaN/);
    expect(b.used).toBe(100);
    // The budget still works afterwards, and its count is exact.
    expect(b.tryReserve(900)).toBe(true);
    b.release(1000);
    expect(b.used).toBe(0);
  });

  it('a negative reservation throws E_INVALID_OPTION instead of growing the free bytes', () => {
    const b = new MemoryBudget(1000);
    expectStokerError(() => b.tryReserve(-1), 'E_INVALID_OPTION');
    expect(b.used).toBe(0);
    expect(b.free).toBe(1000);
  });

  it.each([-1, NaN, -Infinity])('a total of %s throws E_INVALID_OPTION naming budgetBytes', (total) => {
    expectStokerError(() => new MemoryBudget(total), 'E_INVALID_OPTION', /budgetBytes/);
  });

  it('a zero budget grants only zero-byte reservations', () => {
    const b = new MemoryBudget(0);
    expect(b.fits(0)).toBe(true);
    expect(b.fits(1)).toBe(false);
    expect(b.tryReserve(1)).toBe(false);
    expect(b.tryReserve(0)).toBe(true);
  });

  it('Infinity means no budget: everything fits and is granted', () => {
    const b = new MemoryBudget(Infinity);
    expect(b.fits(Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(b.tryReserve(Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(b.tryReserve(Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(b.free).toBe(Infinity);
    b.release(Number.MAX_SAFE_INTEGER);
    expect(b.used).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('fits says whether a request could ever be granted, regardless of what is in use', () => {
    const b = new MemoryBudget(500);
    b.tryReserve(500);
    expect(b.fits(500)).toBe(true);
    expect(b.fits(501)).toBe(false);
    expect(b.tryReserve(500)).toBe(false);
  });

  it('held bytes count against the free bytes and the peak (reserved + held), and the peak stays', () => {
    const b = new MemoryBudget(1000);
    b.tryReserve(200);
    b.setHeld(300);
    expect(b.held).toBe(300);
    expect(b.free).toBe(500); // 1000 − 200 − 300
    expect(b.peak).toBe(500); // 200 reserved + 300 held
    expect(b.tryReserve(501)).toBe(false);
    expect(b.tryReserve(500)).toBe(true);
    expect(b.peak).toBe(1000); // 700 reserved + 300 held
    b.release(500);
    b.setHeld(100); // fewer held: the peak stays at its high-water mark
    expect(b.held).toBe(100);
    expect(b.free).toBe(700);
    expect(b.peak).toBe(1000);
    b.setHeld(0);
    expect(b.free).toBe(800);
    expect(b.used).toBe(200); // held bytes never touch the reserved count
  });

  it('setHeld raises the peak by itself when reserved + held passes it', () => {
    const b = new MemoryBudget(1000);
    b.tryReserve(100);
    b.release(100);
    expect(b.peak).toBe(100);
    b.setHeld(40); // 0 reserved + 40 held: below the peak
    expect(b.peak).toBe(100);
    b.tryReserve(50);
    b.setHeld(70); // 50 + 70 = 120
    expect(b.peak).toBe(120);
  });

  it.each([-1, NaN, Infinity])('setHeld(%s) throws E_INVALID_OPTION and keeps the held bytes', (bytes) => {
    const b = new MemoryBudget(1000);
    b.setHeld(10);
    expectStokerError(() => b.setHeld(bytes), 'E_INVALID_OPTION', /held memory/);
    expect(b.held).toBe(10);
    expect(b.peak).toBe(10);
  });

  it('a zero reservation can be released like any other', () => {
    const b = new MemoryBudget(10);
    b.tryReserve(4);
    expect(b.tryReserve(0)).toBe(true);
    b.release(0);
    expect(b.used).toBe(4);
  });

  it('setHeld(0) is allowed; a fresh budget holds nothing', () => {
    const b = new MemoryBudget(10);
    expect(b.held).toBe(0);
    b.setHeld(0);
    expect(b.held).toBe(0);
    expect(b.free).toBe(10);
  });
});
