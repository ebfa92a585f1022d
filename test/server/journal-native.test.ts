/**
 * The journal where SQLite's native module is missing (better-sqlite3 installed with
 * --ignore-scripts: its build never ran): the constructor throws what the `bindings` package says,
 * and the start names the fix instead of advising to move the journal away.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';

vi.mock('better-sqlite3', () => ({
  default: function Database() {
    throw new Error('Could not locate the bindings file. Tried:\n → /app/node_modules/better-sqlite3/build/better_sqlite3.node\n → /app/node_modules/better-sqlite3/build/Release/better_sqlite3.node');
  },
}));

const { Journal } = await import('../../src/server/journal.js');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-journal-native-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('a journal without SQLite’s native module', () => {
  it('says to rebuild better-sqlite3, and that the jobs are untouched (it said to move the journal away)', () => {
    let message = '';
    try {
      Journal.open(path.join(dir, 'data'));
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/SQLite's native module \(better-sqlite3\) is not built for this Node v\d+.* \(Error: Could not locate the bindings file\. Tried:\) — an install with --ignore-scripts skips its build: run `npm rebuild better-sqlite3` where stoker is installed, then start again; the data dir and its jobs are untouched$/);
    expect(message).not.toMatch(/move the file/);
  });
});
