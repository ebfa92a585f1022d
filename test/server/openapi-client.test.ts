/**
 * The OpenAPI document as a client generator sees it: types generated from the document a real
 * server serves (openapi-typescript), a submit-and-wait program written against them with
 * openapi-fetch, type-checked under `strict` without a cast, then run against that server. And
 * the server's answers hold no field the document does not name.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { http, removeDir, startServer, tempDataDir, undocumented, type OpenApiDoc, type ServerProcess } from './helpers.js';

const PROGRAM = `import createClient from 'openapi-fetch';
import type { paths } from './api.js';

const client = createClient<paths>({ baseUrl: process.argv[2] ?? 'http://127.0.0.1:7070' });
const submitted = await client.POST('/v1/jobs', { body: { id: 'typed-1', kind: 'sleep', partitions: 3, input: { seed: 1, prepareMs: 5, deviceMs: 5 } } });
if (!submitted.data) throw new Error(\`submit failed: \${submitted.error.status} \${submitted.error.detail}\`);
const id: string = submitted.data.id;
const partitions: number = submitted.data.partitions;
const ended = await client.GET('/v1/jobs/{id}/result', { params: { path: { id }, query: { wait: '30s' } } });
if (!ended.data) throw new Error(\`result failed: \${ended.error.detail}\`);
const state: 'queued' | 'running' | 'done' | 'failed' | 'cancelled' = ended.data.state;
const code: string | null = ended.data.error ? ended.data.error.code : null;
const status = await client.GET('/v1/status');
if (!status.data) throw new Error('no status');
const completed: number = status.data.partitions.completed;
const workers: number = status.data.devices[0]?.workers.length ?? 0;
const mode: string = status.data.pacer.mode;
const bad = await client.POST('/v1/jobs', { body: { kind: 'sleep', partitions: 0 } });
const problem: string | undefined = bad.error?.errors?.[0]?.path;
console.log(JSON.stringify({ id, partitions, state, code, result: ended.data.result, completed, workers, mode, problem }));
`;

describe('the OpenAPI document, as a generated client uses it', () => {
  let server: ServerProcess;
  let dataDir: string;
  let dir: string;
  beforeAll(async () => {
    dataDir = tempDataDir();
    server = await startServer(dataDir);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-openapi-'));
    // The program resolves openapi-fetch from the project's own packages.
    fs.symlinkSync(path.resolve('node_modules'), path.join(dir, 'node_modules'), 'dir');
  }, 30_000);
  afterAll(async () => {
    await server?.stop();
    removeDir(dataDir);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a submit-and-wait program type-checks under strict without casts, and runs', async () => {
    const doc = (await http(server.url, 'GET', '/v1/openapi.json')).body;
    fs.writeFileSync(path.join(dir, 'api.d.ts'), astToString(await openapiTS(doc as Parameters<typeof openapiTS>[0])));
    fs.writeFileSync(path.join(dir, 'client.ts'), PROGRAM);
    fs.writeFileSync(path.join(dir, 'package.json'), '{ "type": "module" }\n');
    const program = ts.createProgram([path.join(dir, 'client.ts')], {
      strict: true,
      noUncheckedIndexedAccess: true,
      exactOptionalPropertyTypes: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: ['node'],
      typeRoots: [path.resolve('node_modules/@types')],
      skipLibCheck: true,
      outDir: dir,
    });
    const emitted = program.emit();
    const diagnostics = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics].map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(diagnostics).toEqual([]);
    const run = spawnSync(process.execPath, [path.join(dir, 'client.js'), server.url], { encoding: 'utf8', timeout: 60_000 });
    expect(run.status, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(out).toMatchObject({ id: 'typed-1', partitions: 3, state: 'done', code: null, workers: 2, problem: 'partitions' });
    expect(out['completed']).toBeGreaterThanOrEqual(3);
  }, 60_000);

  it('what the server answers names no field the document leaves out', async () => {
    const doc = (await http(server.url, 'GET', '/v1/openapi.json')).body as OpenApiDoc;
    const s = doc.components.schemas;
    await http(server.url, 'POST', '/v1/jobs', { id: 'doc-2', kind: 'sleep', partitions: 2, input: { seed: 2, prepareMs: 5, deviceMs: 5 } });
    const answers: [string, Record<string, unknown>][] = [
      ['/v1/jobs/doc-2/result?wait=30s', s['Result'] as Record<string, unknown>],
      ['/v1/jobs/doc-2', s['Job'] as Record<string, unknown>],
      ['/v1/status', s['Status'] as Record<string, unknown>],
      ['/v1/timeline?since=5m', s['Timeline'] as Record<string, unknown>],
    ];
    for (const [p, schema] of answers) {
      const r = await http(server.url, 'GET', p);
      expect(r.status, p).toBe(200);
      expect(undocumented(r.body, schema, doc), p).toEqual([]);
      // …and sends every field the document says it always sends.
      for (const k of (schema['required'] as string[] | undefined) ?? []) expect(r.body, `${p} ${k}`).toHaveProperty(k);
    }
    const bad = await http(server.url, 'POST', '/v1/jobs', { kind: 'sleep', partitions: -1 });
    expect(undocumented(bad.body, s['Problem'] as Record<string, unknown>, doc)).toEqual([]);
  }, 60_000);
});
