/**
 * A kind module's misspelt exports, checked in-process (loadKind on files written here; the
 * refusal at `stoker serve --kind` start is tested end to end in kinds.test.ts).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { editDistance, suggest } from '../../src/core/suggest.js';
import { KindModuleError, loadKind } from '../../src/server/kind-module.js';
import type { BatchValues, ChromeTrace, DeviceValues, HistoryView, HttpDeviceConfig, InputIssue, JobProgressEvent, KindModule, ProcessDeviceConfig, Replay, RunContext, StatesPage, Submitted } from '../../src/server/index.js';
import { parseSubmission } from '../../src/server/submission.js';

/**
 * The types of what stoker/server's documented calls take and give, each importable by name (a
 * user trial found none of these: ReturnType<…> or nothing) — the typecheck of this file fails
 * should one go.
 */
export type ServerTypes = [Submitted, StatesPage, JobProgressEvent, HistoryView, Replay, ChromeTrace, InputIssue, ProcessDeviceConfig, HttpDeviceConfig, DeviceValues, BatchValues];

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-kind-module-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const OK = 'export const name = "k"; export async function prepare() { return 1; } export function run(p) { return p; }';
let n = 0;
/** Loads a module of `source`; the export a refusal names and its message, or 'loaded'. */
async function load(source: string): Promise<string> {
  const file = path.join(dir, `m${n++}.mjs`);
  fs.writeFileSync(file, source);
  try {
    await loadKind(pathToFileURL(file).href, file);
    return 'loaded';
  } catch (e) {
    if (!(e instanceof KindModuleError)) throw e;
    return `${e.exportName}: ${e.message.slice(e.message.indexOf(`export ${e.exportName}: `) + `export ${e.exportName}: `.length)}`;
  }
}

describe('editDistance', () => {
  it('counts two neighbouring letters swapped as one edit (memroy was two from memory, and passed as a helper)', () => {
    expect(editDistance('memroy', 'memory')).toBe(1);
    expect(editDistance('memory', 'memory')).toBe(0);
    expect(editDistance('finsh', 'finish')).toBe(1);
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(editDistance('ab', 'ba')).toBe(1);
    expect(editDistance('abc', 'ca')).toBe(3);
    expect(editDistance('', 'run')).toBe(3);
    expect(suggest('targetWaitnig', ['targetWaiting', 'budgetBytes'])).toBe('targetWaiting');
  });
});

describe('a kind module export near one stoker reads', () => {
  it('is refused naming the export it is near: a swapped pair of letters too (a memory function read by nothing: every partition 0 bytes)', async () => {
    expect(await load(`${OK} export function memroy() { return { prepareBytes: 1e12, deviceBytes: 1e12 }; }`)).toMatch(/^memroy: is not an export stoker reads — did you mean memory\? \(the exports a kind may give: name, description, input, device, memory, /);
    expect(await load(`${OK} export const descripton = "proofs";`)).toMatch(/^descripton: is not an export stoker reads — did you mean description\?/);
    expect(await load(`${OK} export function finsh(o) { return o; }`)).toMatch(/^finsh: .*did you mean finish\?/);
  });

  it('is a helper where its name is short or its type is not the export’s', async () => {
    expect(await load(`${OK} export function mem() { return 1; } export const rnu = 3; export function fn() {}`)).toBe('loaded');
  });
});

describe('a kind module TypeScript compiled to CommonJS', () => {
  it('loads, as its default export or its named exports (a default export read as missing every export)', () => {
    // In Node itself (the built loader): the test runner's own module interop unwraps what Node does not.
    const loader = pathToFileURL(path.resolve(import.meta.dirname, '../../dist/server/kind-module.js')).href;
    const cjs = (body: string) => {
      const file = path.join(dir, `c${n++}.cjs`);
      fs.writeFileSync(file, `"use strict";\nObject.defineProperty(exports, "__esModule", { value: true });\n${body}`);
      const script = `const { loadKind } = await import(${JSON.stringify(loader)}); const k = await loadKind(${JSON.stringify(pathToFileURL(file).href)}); console.log(JSON.stringify([k.name, ...(k.notes ?? [])]));`;
      return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })) as string[];
    };
    expect(cjs('exports.default = { name: "cjs-default", prepare: async (i) => i, run: async (p) => p };')).toEqual(['cjs-default']);
    // (Node shows a CommonJS module's exports object as its default too: no "both styles" warning — a user trial's tsc output had one at every start.)
    expect(cjs('exports.name = "cjs-named";\nexports.prepare = async (i) => i;\nexports.run = async (p) => p;')).toEqual(['cjs-named']);
  });
});

describe('a kind module typed in TypeScript', () => {
  it("gives run the job's input as its own type (ctx.input was unknown: a cast in every typed run)", () => {
    interface In {
      k: number;
    }
    const kind = {
      name: 'typed',
      prepare: (input: In, ctx: { partition: number }) => input.k + ctx.partition,
      run: (prepared: number, ctx: RunContext<In>) => prepared * ctx.input.k,
      runBatch: (prepared: number[], ctx: RunContext<In>[]) => prepared.map((p, i) => p * (ctx[i]?.input.k ?? 0)),
    } satisfies KindModule<In, number, number>;
    const ctx: RunContext<In> = { job: 'j', partition: 1, partitions: 2, input: { k: 3 }, device: 0, worker: 0, deviceKind: 'cpu' };
    expect(kind.run(kind.prepare({ k: 3 }, ctx), ctx)).toBe(12);
    expect(kind.runBatch([1, 2], [ctx, ctx])).toEqual([3, 6]);
  });
});

describe("a kind's answers about a submission", () => {
  const kind = async (source: string) => {
    const file = path.join(dir, `m${n++}.mjs`);
    fs.writeFileSync(file, source);
    return new Map([['k', await loadKind(pathToFileURL(file).href, file)]]);
  };
  const submit = (kinds: Awaited<ReturnType<typeof kind>>, input: unknown) => parseSubmission({ kind: 'k', partitions: 1, input }, kinds);

  it("memory() and buffer() are asked at submit: bytes not whole, or a bad buffer, is the kind's bug named there — not a job failed once started, after its retries", async () => {
    const memory = await kind(`${OK} export function memory(i) { return { prepareBytes: i.p, deviceBytes: 0 }; }`);
    for (const p of [1.5, 1e300]) expect(() => submit(memory, { p })).toThrow(/export memory: returned .*it must return \{ prepareBytes, deviceBytes \}, each a whole number of bytes ≥ 0/);
    expect(submit(memory, { p: 4096 }).memory).toEqual({ prepareBytes: 4096, deviceBytes: 0 });
    const buffer = await kind(`${OK} export function memory() { return { prepareBytes: 8, deviceBytes: 8 }; } export function buffer(i) { return i.b; }`);
    for (const b of [-1, 'x', 1.5]) expect(() => submit(buffer, { b })).toThrow(/export buffer: returned .*: it must return a whole number of bytes ≥ 0/);
    expect(submit(buffer, { b: 8 }).memory).toEqual({ prepareBytes: 8, deviceBytes: 8 });
  });

  it("a schema's formats are checked (a trial's format: 'email' took any string, the job done)", async () => {
    const k = await kind(`${OK} export const input = { type: 'object', properties: { email: { type: 'string', format: 'email' }, when: { type: 'string', format: 'date-time' } } };`);
    expect(() => submit(k, { email: 'notanemail', when: 'x' })).toThrow(/input\.email: .*email/);
    expect(() => submit(k, { email: 'a@example.com', when: 'x' })).toThrow(/input\.when: .*date-time/);
    expect(submit(k, { email: 'a@example.com', when: '2026-12-07T10:00:00Z' }).record.input).toEqual({ email: 'a@example.com', when: '2026-12-07T10:00:00Z' });
  });
});

describe("what a newcomer's module gets wrong, said at load (a user trial)", () => {
  const file = (source: string, ext = 'mjs') => {
    const f = path.join(dir, `t${n++}.${ext}`);
    fs.writeFileSync(f, source);
    return f;
  };
  /** Loads a module; its notes, or the refusal's message. */
  const notes = async (f: string, devices?: Parameters<typeof loadKind>[2]): Promise<readonly string[] | string> => {
    try {
      return (await loadKind(pathToFileURL(f).href, f, devices)).notes ?? [];
    } catch (e) {
      if (!(e instanceof KindModuleError)) throw e;
      return e.message;
    }
  };

  /** The refusal of the built loader in Node itself (the test runner's module transform neither throws for CommonJS in an .mjs nor keeps the module's lines). */
  const refusedInNode = (f: string): string => {
    const loader = pathToFileURL(path.resolve(import.meta.dirname, '../../dist/server/kind-module.js')).href;
    // (From a file: a script given to -e has module, exports and require as globals, which the kind module then saw.)
    const script = file(`const { loadKind } = await import(${JSON.stringify(loader)}); try { await loadKind(${JSON.stringify(pathToFileURL(f).href)}, ${JSON.stringify(f)}); console.log('loaded'); } catch (e) { console.log(e.message); }`);
    return execFileSync(process.execPath, [script], { encoding: 'utf8' }).trim();
  };

  it('a CommonJS module in an .mjs, a .ts file or a directory: what to do', () => {
    expect(refusedInNode(file('module.exports = { name: "c" };'))).toMatch(/module is not defined in ES module scope: it is written as CommonJS — name it \.cjs/);
    expect(refusedInNode(file(OK, 'ts'))).toMatch(/Unknown file extension "\.ts".*: compile it to JavaScript first/);
    expect(refusedInNode(dir)).toMatch(/it does not load: it is a directory: give the module file itself/);
  });

  it('an error thrown as it loads: where in the module', () => {
    const f = file('const cfg = undefined;\nexport const name = "t";\nexport const dim = cfg.dim;\nexport async function prepare() { return 1; }\n');
    expect(refusedInNode(f)).toContain(`Cannot read properties of undefined (reading 'dim') (thrown at ${f}:3:`);
  });

  it('a misspelt schema keyword, and a default its own schema refuses: said (each checked nothing, or blamed the client)', async () => {
    const misspelt = await notes(file(`${OK} export const input = { type: 'object', propertis: { n: { type: 'integer' } } };`));
    expect(misspelt).toEqual([expect.stringMatching(/export input: input: unknown keyword "propertis" — did you mean "properties"\?/)]);
    const nested = await notes(file(`${OK} export const input = { type: 'object', properties: { s: { type: 'string', maxLenght: 3 } } };`));
    expect(nested).toEqual([expect.stringMatching(/input\.s: unknown keyword "maxLenght" — did you mean "maxLength"\?/)]);
    const badDefault = await notes(file(`${OK} export const input = { type: 'object', properties: { n: { type: 'integer', default: 'ten' } } };`));
    expect(badDefault).toEqual([expect.stringMatching(/input\.n: its default "ten" does not fit its own schema \(it must be an integer\): fix the default/)]);
    // Each misspelling, not the first alone (a trial's schema of four heard of one).
    const four = await notes(file(`${OK} export const input = { type: 'object', requird: ['b'], properties: { b: { type: 'integer', minimun: 3 }, c: { type: 'string', patern: 'x' }, d: { type: 'array', itmes: {} } } };`));
    expect(four).toEqual(['"requird"', '"minimun"', '"patern"', '"itmes"'].map((k) => expect.stringContaining(`unknown keyword ${k}`)));
    // A format stoker does not know: said once, in the kind's words (ajv printed it bare on stderr, twice).
    const own = await notes(file(`${OK} export const input = { type: 'object', properties: { sku: { type: 'string', format: 'sku-code', default: 'a' } } };`));
    expect(own).toEqual([expect.stringMatching(/export input: format "sku-code" \(at #\/properties\/sku\) is not one stoker knows, so it checks nothing: .*check a format of your own in prepare$/)]);
    // Annotations of one's own, and a sound schema: nothing said.
    expect(await notes(file(`${OK} export const input = { type: 'object', 'x-unit': 'ms', example: {}, properties: { n: { type: 'integer', default: 10, units: 'items' } } };`))).toEqual([]);
  });

  it("memory() or partitions() returning what no input may make them return, on the default input: said at load (it was a 500 at every submit, nothing in the log)", async () => {
    const said = await notes(file(`${OK} export const input = { type: 'object', properties: { n: { type: 'integer', default: 2 } } }; export function partitions(i) { return String(i.n); }`));
    expect(said).toEqual([expect.stringMatching(/export partitions returned "2": it must return a whole number .* on the default input \{"n":2\}: a submission of it gets a 500/)]);
    const buffer = await notes(file(`${OK} export const input = { type: 'object' }; export function buffer() { return -1; }`));
    expect(buffer).toEqual([expect.stringMatching(/export buffer returned -1: it must return a whole number of bytes ≥ 0, on the default input \{\}: a submission of it gets a 500/)]);
    // Without a schema {} is no declared input: nothing is asked of it.
    expect(await notes(file(`${OK} export function memory(i) { return { prepareBytes: i.p, deviceBytes: 0 }; }`))).toEqual([]);
  });

  it('named exports beside a default object: the default is said to be ignored', async () => {
    expect(await notes(file(`${OK.replace('"k"', '"named"')} export default { name: "other", prepare: async () => 1, run: (p) => p };`))).toEqual([expect.stringMatching(/the named exports are the kind \("named"\), the default object is not read/)]);
  });

  it('a kind without run where the server has a process device: it is named', async () => {
    const f = file('export const name = "p"; export async function prepare() { return 1; }');
    expect(await notes(f, new Map([['default', 'thread'], ['gpu', 'process']]))).toMatch(/or run it on "gpu", this server's device served by a process or HTTP: \[kinds\.p\] device = "gpu"/);
  });
});
