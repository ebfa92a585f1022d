/**
 * The package as a user gets it. (1) What dist/ imports: only dependencies and Node's own modules
 * — an optional package (webgpu, bullmq, ioredis, p-queue) only where it is loaded on demand,
 * never in the static import closure of an entry point that works without it. (2) The packed
 * tarball installed into an empty folder: `stoker --help`, and `stoker serve --kind` running the
 * embeddings example (examples/embeddings) with the right vectors.
 *
 * Then the examples run from that folder as a user would run them: the embeddings kind on
 * threads, on a Python process device and on an HTTP device, and a server started from a program.
 *
 * (2) installs from the npm registry (better-sqlite3 compiles: about a minute). `.ci/run` installs
 * the tarball once for its own smoke step and passes the folder in STOKER_INSTALLED_DIR.
 */
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import { builtinModules } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/cluster/redis-server.js';
import { removeDir } from './server/helpers.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const DIST = path.join(ROOT, 'dist');
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
  exports: Record<string, string>;
};
const OPTIONAL = new Set(Object.keys(pkg.peerDependencies).filter((p) => pkg.peerDependenciesMeta[p]?.optional));

interface Imports {
  static: string[];
  dynamic: string[];
}

/** The import specifiers of a compiled ES module (string literals only; a computed import() names no package). */
function importsOf(file: string): Imports {
  const src = fs.readFileSync(file, 'utf8');
  const stat = [...src.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]/gm)].map((m) => (m[1] ?? m[2]) as string);
  const dyn = [...src.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1] as string);
  return { static: stat, dynamic: dyn };
}

const packageOf = (spec: string) => (spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] as string));
const isBuiltin = (spec: string) => spec.startsWith('node:') || builtinModules.includes(spec);

function jsFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? jsFiles(path.join(dir, e.name)) : e.name.endsWith('.js') ? [path.join(dir, e.name)] : []));
}

/** Every package the static import closure of `entry` needs. */
function staticPackages(entry: string): Map<string, string> {
  const seen = new Set<string>();
  const needs = new Map<string, string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const spec of importsOf(file).static) {
      if (spec.startsWith('.')) visit(path.resolve(path.dirname(file), spec));
      else if (!isBuiltin(spec)) needs.set(packageOf(spec), path.relative(DIST, file));
    }
  };
  visit(entry);
  return needs;
}

describe('what the shipped code imports', () => {
  it('only dependencies, Node built-ins and (loaded on demand) optional packages', () => {
    const files = jsFiles(DIST);
    expect(files.length).toBeGreaterThan(40);
    const bad: string[] = [];
    for (const f of files) {
      const { static: s, dynamic: d } = importsOf(f);
      for (const spec of [...s, ...d]) {
        if (spec.startsWith('.') || isBuiltin(spec)) continue;
        const p = packageOf(spec);
        if (!(p in pkg.dependencies) && !OPTIONAL.has(p)) bad.push(`${path.relative(DIST, f)} imports ${spec} (${p in pkg.devDependencies ? 'a devDependency' : 'not a dependency'})`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('no entry point that works without them needs an optional package to load', () => {
    // Every export but stoker/cluster, the CLI, and the modules the threads import.
    const entries = [
      ...Object.entries(pkg.exports).filter(([k]) => k !== './cluster' && k !== './package.json').map(([, v]) => path.join(ROOT, v)),
      path.join(DIST, 'cli/main.js'),
      ...jsFiles(path.join(DIST, 'runtime/threads')),
      ...jsFiles(path.join(DIST, 'kinds')),
      ...jsFiles(path.join(DIST, 'runtime/workloads')).filter((f) => !/webgpu/.test(f)),
    ];
    const bad: string[] = [];
    for (const e of entries) {
      for (const [p, from] of staticPackages(e)) if (OPTIONAL.has(p)) bad.push(`${path.relative(ROOT, e)} needs ${p} (imported by ${from})`);
    }
    expect(bad).toEqual([]);
    // The cluster really is behind its optional packages (so this check can fail).
    expect([...staticPackages(path.join(DIST, 'cluster/cluster-exports.js')).keys()]).toEqual(expect.arrayContaining(['bullmq', 'ioredis']));
  });
});

function sh(cmd: string, args: string[], cwd: string, timeoutMs: number): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { cwd, timeout: timeoutMs, maxBuffer: 64 * 2 ** 20 }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

/** Packs this checkout (without rebuilding: dist/ is current) and installs the tarball into a new folder. */
async function installTarball(): Promise<string> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-installed-'));
  const packed = await sh('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], ROOT, 120_000);
  if (packed.code !== 0) throw new Error(`npm pack failed:\n${packed.stderr}`);
  const tgz = fs.readdirSync(dir).find((f) => f.endsWith('.tgz')) as string;
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'a-user', version: '1.0.0', private: true, type: 'module' }));
  const installed = await sh('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', `./${tgz}`], dir, 600_000);
  if (installed.code !== 0) throw new Error(`npm install of the tarball failed:\n${installed.stderr}`);
  return dir;
}

describe('the packed tarball, installed into an empty folder', () => {
  let dir: string | undefined;
  const given = process.env['STOKER_INSTALLED_DIR'];
  afterAll(() => {
    if (dir && !given) removeDir(dir);
  });
  const folder = async () => (dir ??= given ?? (await installTarball()));

  it(
    'installs without the optional packages and answers --help',
    async () => {
      const d = await folder();
      for (const p of OPTIONAL) expect(fs.existsSync(path.join(d, 'node_modules', p)), p).toBe(false);
      const bin = path.join(d, 'node_modules/.bin/stoker');
      const help = await sh(bin, ['--help'], d, 30_000);
      expect(help.code, help.stderr).toBe(0);
      expect(help.stdout).toMatch(/Usage: stoker/);
      const serveHelp = await sh(bin, ['serve', '--help'], d, 30_000);
      expect(serveHelp.stdout).toMatch(/--kind <file>/);
      // A plan's sweep runs on worker threads from the installed files.
      const plan = await sh(bin, ['plan', 'seed', '--seeds', '1', '--targets', '2,4', '--threads', '2', '--json'], d, 60_000);
      expect(plan.code, plan.stderr).toBe(0);
      expect((JSON.parse(plan.stdout) as { recommended: { config: string[] } | null }).recommended?.config).toContain('[engine]');
      // A feature whose optional package is missing says which one to install.
      const cluster = await sh(bin, ['serve', '--port', '0', '--data', path.join(d, 'cl'), '--cluster', 'redis://127.0.0.1:1'], d, 30_000);
      expect(cluster.code).toBe(2);
      expect(cluster.stderr).toMatch(/cluster mode .* needs the optional packages bullmq and ioredis .*: npm install bullmq ioredis/);
    },
    700_000,
  );

  it('ships every file the README links to, and the sources its source maps name', async () => {
    const d = path.join(await folder(), 'node_modules/stoker');
    const readme = fs.readFileSync(path.join(d, 'README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)].map((m) => m[1] as string).filter((l) => !/^[a-z]+:/i.test(l));
    expect(links.length).toBeGreaterThan(10);
    expect(links.filter((l) => !fs.existsSync(path.join(d, l)))).toEqual([]);
    const map = JSON.parse(fs.readFileSync(path.join(d, 'dist/core/engine.js.map'), 'utf8')) as { sources: string[] };
    expect(map.sources.filter((s) => !fs.existsSync(path.join(d, 'dist/core', s)))).toEqual([]);
  });

  /** `stoker serve ARGS` from the installed folder, until it listens; then `use(url)`, then SIGTERM. */
  async function serving(d: string, args: string[], env: Record<string, string>, use: (url: string, output: () => string) => Promise<void>): Promise<void> {
    const child = spawn(path.join(d, 'node_modules/.bin/stoker'), ['serve', '--port', '0', ...args], { cwd: d, env: { ...process.env, STOKER_PREPARE_THREADS: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const t = setInterval(() => {
          const m = /listening on (http:\/\/\S+)/.exec(out);
          if (m) {
            clearInterval(t);
            resolve(m[1] as string);
          }
        }, 20);
        void exited.then((c) => (clearInterval(t), reject(new Error(`stoker serve exited (${c}):\n${out}`))));
      });
      await use(url, () => out);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  }

  const TEXTS = ['a cat sat on the mat', 'a dog', 'stoker keeps accelerators fed', 'A DOG!', 'zero-knowledge proofs on a GPU'];

  /** Submits TEXTS to the embed kind and returns the result's floats, beside embed()'s. */
  async function embedThrough(url: string, d: string, id: string): Promise<{ got: Float32Array; want: Float32Array }> {
    const sub = await fetch(new URL('/v1/jobs', url), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id, kind: 'embed', input: { texts: TEXTS, batch: 2, dim: 32 } }) });
    expect(sub.status).toBe(202);
    expect(((await sub.json()) as { partitions: number }).partitions).toBe(3);
    const res = await fetch(new URL(`/v1/jobs/${id}/result?wait=60s`, url), { headers: { accept: 'application/octet-stream' } });
    expect(res.status).toBe(200);
    const got = new Float32Array(await res.arrayBuffer());
    const { embed } = (await import(pathToFileURL(path.join(d, 'examples/embeddings/embed-kind.mjs')).href)) as { embed(t: string[], o: { dim: number }): Float32Array };
    return { got, want: embed(TEXTS, { dim: 32 }) };
  }

  /** The examples, as a user would have them beside the installed package. */
  const withExamples = async () => {
    const d = await folder();
    fs.cpSync(path.join(ROOT, 'examples'), path.join(d, 'examples'), { recursive: true });
    return d;
  };

  it(
    'runs the embeddings example kind through stoker serve --kind, with the right vectors',
    async () => {
      const d = await withExamples();
      await serving(d, ['--kind', './examples/embeddings/embed-kind.mjs', '--data', './data-embed'], {}, async (url, output) => {
        expect(output()).toContain('kinds ntt-proof, sleep, embed');
        const { got, want } = await embedThrough(url, d, 'e1');
        expect(got.length).toBe(TEXTS.length * 32);
        expect([...got]).toEqual([...want]);
        // Same words, same vector; every vector has unit length.
        expect([...got.subarray(32, 64)]).toEqual([...got.subarray(96, 128)]);
        for (let r = 0; r < TEXTS.length; r++) expect(Math.hypot(...got.subarray(r * 32, (r + 1) * 32))).toBeCloseTo(1, 5);
        // The CLI client of the installed package sees the job.
        const status = await sh(path.join(d, 'node_modules/.bin/stoker'), ['status', 'e1', '--server', url], d, 30_000);
        expect(JSON.parse(status.stdout)).toMatchObject({ id: 'e1', state: 'done', resultEncoding: 'base64' });
      });
    },
    700_000,
  );

  it(
    'runs the embed kind on a Python process device (python/stoker_worker.py from the package, numpy), with the right vectors',
    async () => {
      const d = await withExamples();
      await serving(d, ['--config', './examples/embeddings/python-device.toml', '--data', './data-py'], {}, async (url, output) => {
        expect(output()).toContain('process (python3 embed_device.py) device workers; kinds embed');
        const { got, want } = await embedThrough(url, d, 'p1');
        expect(got.length).toBe(want.length);
        for (let i = 0; i < want.length; i++) expect(Math.abs((got[i] as number) - (want[i] as number))).toBeLessThan(1e-6);
      });
    },
    700_000,
  );

  it(
    'runs the embed kind on an HTTP device (examples/http-device), with the right vectors',
    async () => {
      const d = await withExamples();
      const port = await freePort();
      const model = spawn(process.execPath, [path.join(d, 'examples/http-device/embed-server.mjs'), '--port', String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
      try {
        await new Promise<void>((resolve) => model.stdout.on('data', (b: Buffer) => b.toString().includes('listening') && resolve()));
        await serving(d, ['--config', './examples/http-device/http-device.toml', '--data', './data-http'], { STOKER_DEVICE_HTTP: JSON.stringify({ url: `http://127.0.0.1:${port}/embed` }) }, async (url) => {
          const { got, want } = await embedThrough(url, d, 'h1');
          expect([...got]).toEqual([...want]);
        });
      } finally {
        model.kill();
      }
    },
    700_000,
  );

  it(
    "runs examples/embeddings/serve.mjs: a server started from the user's program through stoker/server",
    async () => {
      const d = await withExamples();
      const app = path.join(d, 'examples/embeddings');
      const r = await sh(process.execPath, ['serve.mjs'], app, 120_000);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^3 texts → 64 floats each, in 2 partitions; first vector starts -?\d\.\d{4} -?\d\.\d{4} -?\d\.\d{4}; equal to embed\(\)\n$/);
      expect(fs.existsSync(path.join(app, 'embed-data/stoker.db'))).toBe(true);
    },
    700_000,
  );
});
