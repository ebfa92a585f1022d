/**
 * A user's pacer module (`--pacer ./my-pacer.mjs`, `pacer` in a server config): what it has of
 * the Pacer interface reaches the engine, the optional methods included.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPacer, Engine, type ReadonlySnapshot } from '../../src/core/index.js';
import { PacerModuleError, resolvePacer } from '../../src/sim/load-pacer.js';
import { tempDir } from '../cli/helpers.js';

let tmp: ReturnType<typeof tempDir>;
beforeAll(() => {
  tmp = tempDir();
});
afterAll(() => tmp.cleanup());

const snap = { now: 10 } as ReadonlySnapshot;

describe('user pacer modules: the optional methods', () => {
  it('workerLimit and observeAgainAt are delegated to the module’s pacer, and the engine uses them', async () => {
    const file = tmp.file(
      'one-worker.mjs',
      'export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, workerLimit(device) { return device === 0 ? 1 : 5; }, observeAgainAt(s) { return s.now + 250; } });\n',
    );
    const create = await resolvePacer(file);
    const pacer = create({});
    expect(pacer.workerLimit?.(0)).toBe(1);
    expect(pacer.workerLimit?.(1)).toBe(5);
    expect(pacer.observeAgainAt?.(snap)).toBe(260);
    // Three items ready on a device of three workers: the module's limit runs one.
    const e = new Engine({ devices: [{ workers: 3 }], pacer });
    const out = e.apply({ type: 'submit', time: 0, job: { id: 'a', kind: 'k', partitions: 3 } });
    expect(out.filter((c) => c.type === 'wakeAt')).toEqual([{ type: 'wakeAt', time: 250 }]);
    for (let item = 0; item < 3; item++) e.apply({ type: 'prepared', time: 1, item, attempt: 1 });
    expect(e.snapshot.devices[0]?.busy).toBe(1);
  });

  it('absent, they stay absent (every worker runs; no extra wake)', async () => {
    const create = await resolvePacer(tmp.file('plain.mjs', 'export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {} });\n'));
    const pacer = create({});
    expect(pacer.workerLimit).toBeUndefined();
    expect(pacer.observeAgainAt).toBeUndefined();
  });

  it('present but not a function: a clear error naming the method', async () => {
    const create = await resolvePacer(tmp.file('bad-limit.mjs', 'export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, workerLimit: 2 });\n'));
    expect(() => create({})).toThrow(PacerModuleError);
    expect(() => create({})).toThrow(/has a workerLimit that is not a function; make it a method \(workerLimit\(device\)/);
  });

  it('a state() of the wrong shape is an error when the pacer is created, not only when something reads it', async () => {
    const create = await resolvePacer(tmp.file('bad-state.mjs', "export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, state() { return { mode: 'running', ratePerSec: null, intervalMs: null, terms: {} }; } });\n"));
    expect(() => create({})).toThrow(/state\(\)\.mode must be one of bootstrap, steady, idle, blocked, hold \(got "running"\)/);
  });

  it('a time that is not a number (NaN, a string) is an error naming the module and the method, not a silent stall', async () => {
    for (const [i, body, got] of [
      [0, 'nextDispatchAt() { return NaN; }', 'NaN'],
      [1, "nextDispatchAt() { return 'soon'; }", '"soon"'],
      [2, 'nextDispatchAt() {}', 'undefined'],
    ] as const) {
      const create = await resolvePacer(tmp.file(`bad-time-${i}.mjs`, `export default () => ({ observe() {}, ${body}, onDispatch() {} });\n`));
      const pacer = create({});
      expect(() => pacer.nextDispatchAt(snap)).toThrow(PacerModuleError);
      expect(() => pacer.nextDispatchAt(snap)).toThrow(`bad-time-${i}.mjs: nextDispatchAt(snapshot) must return a time in ms (a number; Infinity for none) (got ${got})`);
    }
    const create = await resolvePacer(tmp.file('bad-again.mjs', "export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, observeAgainAt() { return 'later'; }, workerLimit() { return -1; } });\n"));
    const pacer = create({});
    expect(pacer.nextDispatchAt(snap)).toBe(10);
    expect(() => pacer.observeAgainAt?.(snap)).toThrow(/observeAgainAt\(snapshot\) must return a time in ms .*\(got "later"\)/);
    expect(() => pacer.workerLimit?.(0)).toThrow(/workerLimit\(device\) must return the most workers to run at once .*\(got -1\)/);
    // Nothing is no time either (it was read as Infinity, as the README says it is not).
    const nothing = (await resolvePacer(tmp.file('no-again.mjs', 'export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, observeAgainAt() {} });\n')))({});
    expect(() => nothing.observeAgainAt?.(snap)).toThrow(/observeAgainAt\(snapshot\) must return a time in ms .*\(got undefined\)/);
  });

  it('a snapshot field that is not there is an error naming it and the fields there are (a misspelt one read undefined and stalled a run silently)', async () => {
    const create = await resolvePacer(tmp.file('misread.mjs', 'export default () => ({ observe(s) { this.lat = s.prepareLatencySumMs / s.prepareCompletions; }, nextDispatchAt(s) { return s.nwo; }, onDispatch() {} });\n'));
    const pacer = create({});
    const real = new Engine({ devices: [{ workers: 1 }], pacer: createPacer('unpaced') }).snapshot;
    expect(() => pacer.observe(real)).toThrow(PacerModuleError);
    expect(() => pacer.observe(real)).toThrow(/misread\.mjs read snapshot\.prepareLatencySumMs, which a snapshot does not have: its fields are now, .*prepareLatencyMsTotal/);
    expect(() => pacer.nextDispatchAt(real)).toThrow(/read snapshot\.nwo, which a snapshot does not have \(did you mean now\?\)/);
    // Fields that are there, and what JSON.stringify asks for, read as they are.
    const fine = (await resolvePacer(tmp.file('reads.mjs', 'export default () => ({ observe(s) { JSON.stringify(s); }, nextDispatchAt(s) { return s.now + s.devices.length; }, onDispatch() {} });\n')))({});
    fine.observe(real);
    expect(fine.nextDispatchAt(real)).toBe(real.now + 1);
    // structuredClone cannot copy the checked view: the error says how to copy it.
    const cloning = (await resolvePacer(tmp.file('clones.mjs', 'export default () => ({ observe(s) { structuredClone(s); }, nextDispatchAt(s) { return s.now; }, onDispatch() {} });\n')))({});
    expect(() => cloning.observe(real)).toThrow(/could not be cloned.* — the snapshot is a checked view of the engine’s counters, its devices and kinds too: copy it with JSON\.parse\(JSON\.stringify\(snapshot\)\)/);
    // The copy it names clones, and can be changed.
    const copying = (await resolvePacer(tmp.file('json-copy.mjs', 'export default () => ({ observe(s) { const c = structuredClone(JSON.parse(JSON.stringify(s))); c.devices[0].busy = 5; this.b = c.devices[0].busy; }, nextDispatchAt(s) { return s.now + this.b; }, onDispatch() {} });\n')))({});
    copying.observe(real);
    expect(copying.nextDispatchAt(real)).toBe(real.now + 5);
  });

  it("a write to the snapshot, at any depth, is an error naming the field (one set snapshot.waiting = 0: the engine's own counter, read by the measures)", async () => {
    const real = new Engine({ devices: [{ workers: 2 }], pacer: createPacer('unpaced') }).snapshot;
    for (const [i, body, field] of [
      [0, 's.waiting = 0', 'snapshot.waiting'],
      [1, 's.devices[0].busy = 0', 'snapshot.devices[0].busy'],
      [2, 's.devices.push({})', 'snapshot.devices[1]'],
      [3, 'delete s.now', 'snapshot.now (a delete)'],
      [4, 'Object.assign(s, { workers: 99 })', 'snapshot.workers'],
    ] as const) {
      const pacer = (await resolvePacer(tmp.file(`writes-${i}.mjs`, `export default () => ({ observe(s) { ${body}; }, nextDispatchAt(s) { return s.now; }, onDispatch() {} });\n`)))({});
      expect(() => pacer.observe(real), body).toThrow(PacerModuleError);
      expect(() => pacer.observe(real), body).toThrow(`writes-${i}.mjs wrote ${field}: the snapshot is the engine's own counters, read-only`);
    }
    expect(real.waiting).toBe(0);
    expect(real.workers).toBe(2);
    expect(real.devices.length).toBe(1);
    expect(real.devices[0]?.busy).toBe(0);
    // Reads at any depth, and copies of it, are as they were.
    const copies = (await resolvePacer(tmp.file('copies.mjs', 'export default () => ({ observe(s) { const c = { ...s, devices: s.devices.map((d) => ({ ...d })) }; c.waiting = 5; c.devices[0].busy = 1; this.n = s.devices[0].workers; }, nextDispatchAt(s) { return s.now + this.n; }, onDispatch() {} });\n')))({});
    copies.observe(real);
    expect(copies.nextDispatchAt(real)).toBe(real.now + 2);
  });

  it('what a method throws names the module and the method, as the module\'s fault (a PacerModuleError, its error the cause)', async () => {
    const create = await resolvePacer(tmp.file('throws.mjs', "export default () => ({ observe() { throw new Error('pacer bug'); }, nextDispatchAt(s) { return s.now; }, onDispatch() {} });\n"));
    const pacer = create({});
    expect(() => pacer.observe(snap)).toThrow(/the pacer created by .*throws\.mjs threw in observe: pacer bug/);
    expect(() => pacer.observe(snap)).toThrow(PacerModuleError);
    try {
      pacer.observe(snap);
    } catch (e) {
      expect(((e as Error).cause as Error).message).toBe('pacer bug');
    }
  });

  it('a factory that throws, or is async, is named; a state() answering NaN or null says so (it said "got null", "state(). must be")', async () => {
    const throws = await resolvePacer(tmp.file('factory-throws.mjs', "export default () => { throw new Error('factory boom'); };\n"));
    expect(() => throws({})).toThrow(/the default export of .*factory-throws\.mjs threw: factory boom/);
    const async_ = await resolvePacer(tmp.file('factory-async.mjs', 'export default async () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {} });\n'));
    expect(() => async_({})).toThrow(/factory-async\.mjs returned a Promise: make createPacer\(options\) return the pacer object itself/);
    const nan = await resolvePacer(tmp.file('state-nan.mjs', "export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, state() { return { mode: 'steady', ratePerSec: NaN, intervalMs: null, terms: {} }; } });\n"));
    expect(() => nan({})).toThrow(/state\(\)\.ratePerSec must be a number ≥ 0 or null \(got NaN\)/);
    const none = await resolvePacer(tmp.file('state-null.mjs', 'export default () => ({ observe() {}, nextDispatchAt(s) { return s.now; }, onDispatch() {}, state() { return null; } });\n'));
    expect(() => none({})).toThrow(/: state\(\) must be an object \(got null\)/);
  });

  it('a built-in pacer resolves to itself (the stoker pacer has both methods)', async () => {
    const create = await resolvePacer('stoker');
    const pacer = create({});
    expect(typeof pacer.workerLimit).toBe('function');
    expect(typeof pacer.observeAgainAt).toBe('function');
    expect(createPacer('unpaced').observeAgainAt).toBeUndefined();
  });
});
