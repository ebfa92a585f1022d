import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PACER_NAMES } from '../../src/core/index.js';
import { CONFIG_DOC, ConfigError, configToToml, loadConfig, type ServeConfig } from '../../src/server/config.js';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-config-'));
});
afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** Writes `text` to `name` in the temp dir; returns its path. */
function write(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return file;
}

/** The ConfigError that `fn` throws. */
function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error('expected a ConfigError');
}

describe('defaults', () => {
  it('every field has its default, dataDir resolved against cwd, unlimited/none as Infinity', () => {
    const c = loadConfig({ env: {}, cwd: dir });
    expect(c).toEqual({
      dataDir: path.join(dir, 'stoker-data'),
      server: {
        host: '127.0.0.1', port: 7070, bodyLimitBytes: 1_048_576, maxPendingJobs: 10_000, maxPendingPartitions: 200_000, retryAfterS: 5, resultTtlS: 86_400, shutdownTimeoutS: 30, maxWaitS: 300,
        token: '', allowedHosts: [], openWithoutToken: false, requestTimeoutS: 30, headersTimeoutS: 10, keepAliveTimeoutS: 5, maxConnections: 1024, maxEventStreams: 256, tlsCert: '', tlsKey: '',
      },
      engine: { pacer: 'stoker', targetWaiting: 4, budgetBytes: Infinity, retries: 1, deviceTimeoutS: Infinity, prepareTimeoutS: Infinity, pacerOptions: {} },
      device: { kind: 'cpu', workers: 2 },
      prepare: { threads: Math.max(1, os.availableParallelism() - 1), concurrency: 64 },
      cluster: { redis: 'none', lockMs: 6000, heartbeatMs: 2000, nodeId: `${os.hostname().replace(/[^A-Za-z0-9._-]/g, '-').replace(/^[^A-Za-z0-9]+/, '').slice(0, 80) || 'node'}-${process.pid}` },
    } satisfies ServeConfig);
  });

  it('unrelated environment variables are ignored, empty ones count as unset', () => {
    const c = loadConfig({ env: { PATH: '/bin', STOKER_WEBGPU_BACKEND: 'vulkan', STOKER_SERVER_PORT: '' }, cwd: dir });
    expect(c.server.port).toBe(7070);
  });

  it('CONFIG_DOC lists every field with its environment variable', () => {
    for (const v of ['STOKER_DATA_DIR', 'STOKER_SERVER_MAX_PENDING_JOBS', 'STOKER_ENGINE_TARGET_WAITING', 'STOKER_DEVICE_KIND', 'STOKER_PREPARE_CONCURRENCY']) {
      expect(CONFIG_DOC).toContain(v);
    }
    expect(CONFIG_DOC).toContain('server.maxWaitS');
    for (const v of ['STOKER_CLUSTER_REDIS', 'STOKER_CLUSTER_LOCK_MS', 'STOKER_CLUSTER_HEARTBEAT_MS', 'STOKER_CLUSTER_NODE_ID']) expect(CONFIG_DOC).toContain(v);
  });

  it('cluster mode is off by default; --cluster and STOKER_CLUSTER_* set it, bad values are named', () => {
    const c = loadConfig({ env: {}, cwd: dir });
    expect(c.cluster.redis).toBe('none');
    expect(c.cluster.lockMs).toBe(6000);
    expect(c.cluster.heartbeatMs).toBe(2000);
    expect(c.cluster.nodeId).toMatch(new RegExp(`-${process.pid}$`));
    const d = loadConfig({ env: { STOKER_CLUSTER_LOCK_MS: '3000', STOKER_CLUSTER_NODE_ID: 'n1', STOKER_CLUSTER_REDIS: 'redis://a:1' }, flags: { cluster: 'redis://127.0.0.1:6380/2' }, cwd: dir });
    expect(d.cluster).toEqual({ redis: 'redis://127.0.0.1:6380/2', lockMs: 3000, heartbeatMs: 2000, nodeId: 'n1' });
    expect(() => loadConfig({ env: { STOKER_CLUSTER_REDIS: 'http://x', STOKER_CLUSTER_LOCKMS: '1' }, cwd: dir })).toThrow(/STOKER_CLUSTER_LOCKMS: cluster\.lockms: unknown setting — did you mean STOKER_CLUSTER_LOCK_MS\?/);
    expect(() => loadConfig({ env: {}, flags: { cluster: 'http://x' }, cwd: dir })).toThrow(/--cluster: cluster\.redis: expected a redis:\/\/ URL or "none"/);
    // Past 2^31 − 1 ms Node fires a timer after 1 ms: a lockMs of 7e9 renewed its locks in a loop.
    expect(() => loadConfig({ env: { STOKER_CLUSTER_LOCK_MS: '7000000000' }, cwd: dir })).toThrow('STOKER_CLUSTER_LOCK_MS: cluster.lockMs: expected an integer from 100 to 2147483647 (ms), got 7000000000');
    expect(() => loadConfig({ env: { STOKER_CLUSTER_HEARTBEAT_MS: '5000000000' }, cwd: dir })).toThrow('cluster.heartbeatMs: expected an integer from 50 to 2147483647 (ms)');
  });
});

describe('sources and precedence', () => {
  it('file < environment < flags, field by field', () => {
    const file = write(
      'stoker.toml',
      `dataDir = "journal"
[server]
host = "0.0.0.0"
port = 8000
maxPendingJobs = 50
[engine]
pacer = "classic"
targetWaiting = 6
budgetBytes = 412316860416
deviceTimeoutS = 120
pacerOptions = { kp = 0.3 }
[device]
kind = "webgpu"
workers = 4
[prepare]
threads = 3
concurrency = 8
`,
    );
    const fromFile = loadConfig({ file, env: {}, cwd: '/' });
    expect(fromFile.dataDir).toBe(path.join(dir, 'journal')); // relative to the file's directory
    expect(fromFile.server).toMatchObject({ host: '0.0.0.0', port: 8000, maxPendingJobs: 50, retryAfterS: 5 });
    expect(fromFile.engine).toEqual({ pacer: 'classic', targetWaiting: 6, budgetBytes: 412316860416, retries: 1, deviceTimeoutS: 120, prepareTimeoutS: Infinity, pacerOptions: { kp: 0.3 } });
    expect(fromFile.device).toEqual({ kind: 'webgpu', workers: 4 });
    expect(fromFile.prepare).toEqual({ threads: 3, concurrency: 8 });

    const env = {
      STOKER_DATA_DIR: 'env-data',
      STOKER_SERVER_PORT: '9000',
      STOKER_SERVER_MAX_PENDING_JOBS: '75',
      STOKER_ENGINE_TARGET_WAITING: '2.5',
      STOKER_ENGINE_PACER_OPTIONS: 'ki=0.002',
      STOKER_DEVICE_KIND: 'cpu',
    };
    const fromEnv = loadConfig({ file, env, cwd: dir });
    expect(fromEnv.dataDir).toBe(path.join(dir, 'env-data')); // relative to cwd
    expect(fromEnv.server).toMatchObject({ host: '0.0.0.0', port: 9000, maxPendingJobs: 75 });
    expect(fromEnv.engine).toMatchObject({ pacer: 'classic', targetWaiting: 2.5, pacerOptions: { ki: 0.002 } }); // the table is replaced whole
    expect(fromEnv.device).toEqual({ kind: 'cpu', workers: 4 });

    const fromFlags = loadConfig({ file, env, flags: { host: '::1', port: '0', dataDir: '/srv/stoker' }, cwd: dir });
    expect(fromFlags.server).toMatchObject({ host: '::1', port: 0, maxPendingJobs: 75 });
    expect(fromFlags.dataDir).toBe(path.resolve('/srv/stoker'));
    // (The environment's pacer options are classic's: without the file, the pacer named too.)
    expect(loadConfig({ env: { ...env, STOKER_ENGINE_PACER: 'classic' }, flags: { port: 7171 }, cwd: dir }).server.port).toBe(7171);
  });

  it('environment strings stay strings where the field takes text, numbers are coerced elsewhere', () => {
    const c = loadConfig({ env: { STOKER_SERVER_HOST: '10', STOKER_DATA_DIR: '2024', STOKER_ENGINE_BUDGET_BYTES: '1e9', STOKER_ENGINE_RETRIES: '0', STOKER_ENGINE_PACER_OPTIONS: '{"headStart": 16}' }, cwd: dir });
    expect(c.server.host).toBe('10');
    expect(c.dataDir).toBe(path.join(dir, '2024'));
    expect(c.engine).toMatchObject({ budgetBytes: 1e9, retries: 0, pacerOptions: { headStart: 16 } });
  });
});

describe('environment variables', () => {
  it('a misspelt section that is a near miss of a setting is refused, naming it (STOKER_SERVE_PORT was ignored); other STOKER_* variables are not settings', () => {
    expect(() => loadConfig({ env: { STOKER_SERVE_PORT: '8000' }, cwd: dir })).toThrow('STOKER_SERVE_PORT: unknown setting — did you mean STOKER_SERVER_PORT?');
    expect(() => loadConfig({ env: { STOKER_SERVER: 'http://127.0.0.1:7070', STOKER_DEBUG: '1', STOKER_REQUIRE_REDIS: '1', STOKER_INSTALLED_DIR: '/tmp/x', STOKER_WEBGPU_BACKEND: 'vulkan' }, cwd: dir })).not.toThrow();
  });

  it('a setting named without its section is refused, naming its variable (STOKER_TOKEN was ignored: no token, the user believing there was one); so is a named device or kind by variable — but not what Kubernetes or stoker itself set', () => {
    expect(() => loadConfig({ env: { STOKER_TOKEN: 'a-long-enough-secret-token' }, cwd: dir })).toThrow('STOKER_TOKEN: unknown setting — did you mean STOKER_SERVER_TOKEN?');
    expect(() => loadConfig({ env: { STOKER_HOST: '0.0.0.0' }, cwd: dir })).toThrow('STOKER_HOST: unknown setting — did you mean STOKER_SERVER_HOST?');
    // Named after a flag that has no variable (a trial's STOKER_TOKEN_FILE was ignored: the server open to anyone).
    expect(() => loadConfig({ env: { STOKER_TOKEN_FILE: '/run/secrets/token' }, cwd: dir })).toThrow('STOKER_TOKEN_FILE: unknown setting — the token file is a flag only: give --token-file FILE, or set STOKER_SERVER_TOKEN to the token itself');
    expect(() => loadConfig({ env: { STOKER_CLUSTER: 'redis://127.0.0.1:6379' }, cwd: dir })).toThrow('STOKER_CLUSTER: unknown setting — did you mean STOKER_CLUSTER_REDIS');
    expect(() => loadConfig({ env: { STOKER_CONFIG: '/etc/stoker.toml' }, cwd: dir })).toThrow('STOKER_CONFIG: unknown setting — the config file is a flag only');
    expect(() => loadConfig({ env: { STOKER_DEVICES_GPU: '{"workers":2}' }, cwd: dir })).toThrow(/STOKER_DEVICES_GPU: unknown setting — \[devices\.NAME\] and \[kinds\.NAME\] tables are set in the config file/);
    // Kubernetes' service variables for a service named stoker, and a process device worker's own.
    expect(() => loadConfig({ env: { STOKER_PORT: 'tcp://10.0.0.1:7070', STOKER_SERVICE_HOST: '10.0.0.1', STOKER_SERVICE_PORT: '7070', STOKER_PORT_7070_TCP_ADDR: '10.0.0.1', STOKER_WORKER: '0', STOKER_WORKERS: '2' }, cwd: dir })).not.toThrow();
    // Services named stoker-kinds and stoker-server in the same namespace (a review: the first was refused).
    expect(() => loadConfig({ env: { STOKER_KINDS_SERVICE_HOST: '10.0.0.9', STOKER_KINDS_SERVICE_PORT_HTTP: '80', STOKER_KINDS_PORT_80_TCP: 'tcp://10.0.0.9:80', STOKER_KINDS_PORT: 'tcp://10.0.0.9:80', STOKER_SERVER_SERVICE_HOST: '10.0.0.8', STOKER_SERVER_PORT_7070_TCP_PROTO: 'tcp' }, cwd: dir })).not.toThrow();
    // The service named stoker-server also gives STOKER_SERVER_PORT=tcp://…, a setting's name: not the port (it was refused), which a set one still gives.
    expect(loadConfig({ env: { STOKER_SERVER_PORT: 'tcp://10.0.0.8:7070' }, cwd: dir }).server.port).toBe(loadConfig({ env: {}, cwd: dir }).server.port);
    expect(loadConfig({ env: { STOKER_SERVER_PORT: '8081' }, cwd: dir }).server.port).toBe(8081);
    expect(() => loadConfig({ env: { STOKER_SERVER_PORT: '10.0.0.8:7070' }, cwd: dir })).toThrow(/STOKER_SERVER_PORT/);
  });
});

describe('server.token', () => {
  it('a token refused is described, never printed (the error goes to logs)', () => {
    for (const token of ['short-secret', 'a long secret with spaces in it']) {
      let message = '';
      try {
        loadConfig({ values: { server: { token } }, env: {}, cwd: dir });
      } catch (e) {
        message = (e as Error).message;
      }
      expect(message).toMatch(/^loadConfig\(\{ values \}\): server\.token: expected a token of at least 16 characters/);
      expect(message).toContain(`got a string of ${token.length} characters`);
      expect(message).not.toContain(token);
    }
  });
});

describe('[engine.pacerOptions] against the pacer they are for', () => {
  it('a name the pacer does not read is an error naming it and listing the pacer’s options; a value it refuses, too', () => {
    const bad = (pacer: string, pacerOptions: Record<string, number>) => {
      try {
        loadConfig({ values: { engine: { pacer, pacerOptions } }, env: {}, cwd: dir });
      } catch (e) {
        return (e as Error).message;
      }
      return '';
    };
    expect(bad('stoker', { headStrat: 2 })).toMatch(/^loadConfig\(\{ values \}\): engine\.pacerOptions\.headStrat: the stoker pacer has no option headStrat — did you mean headStart\? \(its options are priorServiceMs, .*headStart.*\): check the spelling, or remove it$/);
    expect(bad('unpaced', { window: 2 })).toBe('loadConfig({ values }): engine.pacerOptions.window: the unpaced pacer has no option window (it has no options): check the spelling, or remove it');
    // targetWaiting is the server's (engine.targetWaiting, given to every pacer): one here was overridden by it, silently.
    expect(bad('classic', { targetWaiting: 9 })).toBe('loadConfig({ values }): engine.pacerOptions.targetWaiting: the server sets every pacer\'s targetWaiting from engine.targetWaiting (now 4): set engine.targetWaiting = 9 instead, and remove it here');
    expect(bad('stoker', { headStart: -2 })).toBe('loadConfig({ values }): engine.pacerOptions: pacer option headStart must be a number ≥ 0 (got -2)');
    expect(bad('window', { window: 16 })).toBe('');
    // From a file: the file is named (it was "configuration").
    const file = write('p.toml', '[engine.pacerOptions]\nheadStrat = 2\n');
    expect(configError(() => loadConfig({ file, env: {}, cwd: dir })).message).toMatch(new RegExp(`^${file}: engine\\.pacerOptions\\.headStrat: the stoker pacer has no option headStrat`));
  });
});

describe('"unlimited" and "none"', () => {
  it('resolve to Infinity from a file and from the environment, and can be overridden by a number', () => {
    const file = write('a.toml', '[engine]\nbudgetBytes = "unlimited"\ndeviceTimeoutS = "none"\nprepareTimeoutS = 600\n');
    expect(loadConfig({ file, env: {}, cwd: dir }).engine).toMatchObject({ budgetBytes: Infinity, deviceTimeoutS: Infinity, prepareTimeoutS: 600 });
    const capped = write('b.toml', '[engine]\nbudgetBytes = 1024\ndeviceTimeoutS = 2.5\n');
    expect(loadConfig({ file: capped, env: {}, cwd: dir }).engine).toMatchObject({ budgetBytes: 1024, deviceTimeoutS: 2.5 });
    const c = loadConfig({ file: capped, env: { STOKER_ENGINE_BUDGET_BYTES: 'unlimited', STOKER_ENGINE_DEVICE_TIMEOUT_S: 'none' }, cwd: dir });
    expect(c.engine).toMatchObject({ budgetBytes: Infinity, deviceTimeoutS: Infinity });
  });

  it('the words belong to their own field only, and must be spelled exactly', () => {
    const e = configError(() => loadConfig({ env: { STOKER_ENGINE_BUDGET_BYTES: 'none', STOKER_ENGINE_DEVICE_TIMEOUT_S: 'never' }, cwd: dir }));
    expect(e.issues.map((i) => i.path)).toEqual(['engine.budgetBytes', 'engine.deviceTimeoutS']);
    expect(e.message).toContain('STOKER_ENGINE_BUDGET_BYTES: engine.budgetBytes: expected a number of bytes > 0 or "unlimited", got "none"');
    expect(e.message).toContain('STOKER_ENGINE_DEVICE_TIMEOUT_S: engine.deviceTimeoutS: expected a number of seconds > 0 (at most 2147483) or "none", got "never" — ');
  });
});

describe('errors name the source, the field and the fix', () => {
  it('a wrong type in the file', () => {
    const file = write('t.toml', '[server]\nport = "eighty"\n[device]\nworkers = 1.5\n');
    const e = configError(() => loadConfig({ file, env: {}, cwd: dir }));
    expect(e.code).toBe('E_CONFIG');
    expect(e.issues).toEqual([
      { source: file, path: 'server.port', message: 'expected an integer from 0 to 65535, got "eighty" — use e.g. 7070, or 0 to pick a free port' },
      { source: file, path: 'device.workers', message: 'expected an integer from 1 to 64, got 1.5 — use e.g. 2 (pipelined workers on the device)' },
    ]);
    expect(e.message.split('\n')).toEqual([
      `${file}: server.port: expected an integer from 0 to 65535, got "eighty" — use e.g. 7070, or 0 to pick a free port`,
      `${file}: device.workers: expected an integer from 1 to 64, got 1.5 — use e.g. 2 (pipelined workers on the device)`,
    ]);
  });

  it('a section that is not a table', () => {
    const file = write('s.toml', 'server = 5\n');
    expect(configError(() => loadConfig({ file, env: {}, cwd: dir })).message).toBe(`${file}: server: expected a table [server], got 5 — write its settings under a [server] header`);
  });

  it('an unknown key, with a suggestion when one is close', () => {
    const file = write('u.toml', 'data_dir = "x"\n[server]\nprot = 1\nmax_pending_jobs = 3\nzzz = 1\n[sever]\nport = 1\n');
    const e = configError(() => loadConfig({ file, env: {}, cwd: dir }));
    const lines = e.message.split('\n');
    expect(lines).toHaveLength(5);
    expect(lines).toContain(`${file}: server.prot: unknown key in [server] — did you mean "port"? the keys in [server] are: host, port, bodyLimitBytes, maxPendingJobs, maxPendingPartitions, retryAfterS, resultTtlS, shutdownTimeoutS, maxWaitS, token, allowedHosts, openWithoutToken, requestTimeoutS, headersTimeoutS, keepAliveTimeoutS, maxConnections, maxEventStreams, tlsCert, tlsKey`);
    expect(e.message).toContain(`${file}: server.max_pending_jobs: unknown key in [server] — did you mean "maxPendingJobs"?`);
    expect(e.message).toContain(`${file}: server.zzz: unknown key in [server] — remove it; the keys in [server] are: host, port,`);
    expect(e.message).toContain(`${file}: data_dir: unknown key at the top level — did you mean "dataDir"?`);
    expect(e.message).toContain(`${file}: sever: unknown key at the top level — did you mean "server"?`);
  });

  it('a misspelling that differs only in its ending is suggested (retry: 3 edits from retries, it said "remove it"); a device table\'s key in [device] names its table', () => {
    const file = write('r.toml', '[engine]\nretry = 3\n[device]\nurl = "http://127.0.0.1:9/e"\ntimeoutS = 5\ncommand = "python3"\n[devices.gpu]\nmaxItems = 4\n');
    const e = configError(() => loadConfig({ file, env: {}, cwd: dir }));
    expect(e.message).toContain(`${file}: engine.retry: unknown key in [engine] — did you mean "retries"?`);
    expect(e.message).toContain(`${file}: device.url: unknown key in [device] — it is a key of [device.http]: write it under that header;`);
    expect(e.message).toContain(`${file}: device.timeoutS: unknown key in [device] — it is a key of [device.http]: write it under that header;`);
    expect(e.message).toContain(`${file}: device.command: unknown key in [device] — it is a key of [device.process]: write it under that header;`);
    expect(e.message).toContain(`${file}: devices.gpu.maxItems: unknown key in [devices.gpu] — it is a key of [devices.gpu.batch]: write it under that header;`);
  });

  it("a section's key written at the top level names its section", () => {
    const file = write('t.toml', 'deviceTimeoutS = 5\n');
    expect(configError(() => loadConfig({ file, env: {}, cwd: dir })).message).toMatch(new RegExp(`^${file}: deviceTimeoutS: unknown key at the top level — it belongs in \\[engine\\] \\(engine\\.deviceTimeoutS\\): write it under the \\[engine\\] header;`));
  });

  it('a bad number in the environment names the variable', () => {
    const e = configError(() => loadConfig({ env: { STOKER_SERVER_PORT: 'abc', STOKER_SERVER_RESULT_TTL_S: '0' }, cwd: dir }));
    expect(e.issues).toEqual([
      { source: 'STOKER_SERVER_PORT', path: 'server.port', message: 'expected an integer from 0 to 65535, got "abc" — use e.g. 7070, or 0 to pick a free port' },
      { source: 'STOKER_SERVER_RESULT_TTL_S', path: 'server.resultTtlS', message: 'expected a number of seconds > 0, at most 315360000 (10 years), got 0 — use e.g. 86400 (one day)' },
    ]);
  });

  it('an unknown STOKER_ENGINE_ variable, with a suggestion', () => {
    const e = configError(() => loadConfig({ env: { STOKER_ENGINE_TARGET_WAITNG: '3', STOKER_PREPARE_FOO: '1' }, cwd: dir }));
    expect(e.message.split('\n')).toEqual([
      'STOKER_ENGINE_TARGET_WAITNG: engine.targetWaitng: unknown setting — did you mean STOKER_ENGINE_TARGET_WAITING? the [engine] variables are: STOKER_ENGINE_PACER, STOKER_ENGINE_TARGET_WAITING, STOKER_ENGINE_BUDGET_BYTES, STOKER_ENGINE_RETRIES, STOKER_ENGINE_DEVICE_TIMEOUT_S, STOKER_ENGINE_PREPARE_TIMEOUT_S, STOKER_ENGINE_PACER_OPTIONS',
      'STOKER_PREPARE_FOO: prepare.foo: unknown setting — unset it; the [prepare] variables are: STOKER_PREPARE_THREADS, STOKER_PREPARE_CONCURRENCY',
    ]);
  });

  it('bad pacer options in the environment', () => {
    const e = configError(() => loadConfig({ env: { STOKER_ENGINE_PACER_OPTIONS: 'window=32,gain' }, cwd: dir }));
    expect(e.message).toMatch(/^STOKER_ENGINE_PACER_OPTIONS: engine\.pacerOptions: expected name=number pairs, got "gain" — write e\.g\. /);
    const json = configError(() => loadConfig({ env: { STOKER_ENGINE_PACER_OPTIONS: '{"window":"big"}' }, cwd: dir }));
    expect(json.message).toBe('STOKER_ENGINE_PACER_OPTIONS: engine.pacerOptions.window: expected a number, got "big" — write each pacer option as name = number, e.g. window = 32');
    // Refused past the fields' own checks (an option the pacer lacks, a certificate not there): the variable is named too, not "the environment (STOKER_*)".
    expect(configError(() => loadConfig({ env: { STOKER_ENGINE_PACER_OPTIONS: '{"gain":0.5}' }, cwd: dir })).message).toMatch(/^STOKER_ENGINE_PACER_OPTIONS: engine\.pacerOptions\.gain: the stoker pacer has no option gain /);
    expect(configError(() => loadConfig({ env: { STOKER_SERVER_TLS_CERT: '/nonexist.pem', STOKER_SERVER_TLS_KEY: '/nonexist.key' }, cwd: dir })).message).toMatch(/^STOKER_SERVER_TLS_CERT: server\.tlsCert: \/nonexist\.pem does not exist/);
  });

  it('a bad value quoted in an error keeps its credentials out (a broken STOKER_DEVICE_HTTP quoted its Authorization header, a bad cluster.redis its password)', () => {
    const http = configError(() => loadConfig({ env: { STOKER_DEVICE_HTTP: '{"url":"http://127.0.0.1:1/x","headers":{"Authorization":"Bearer ENVJSONSECRET123"},' }, cwd: dir }));
    expect(http.message).toMatch(/^STOKER_DEVICE_HTTP: device\.http: expected a JSON object, got .*\\"Authorization\\":\\"\*\*\*\\"/);
    const proc = configError(() => loadConfig({ env: { STOKER_DEVICE_PROCESS: '{"command":"python3","env":{"HF_TOKEN":"hf_PROCSECRET123456"} x' }, cwd: dir }));
    const redis = configError(() => loadConfig({ env: { STOKER_CLUSTER_REDIS: 'redis://:REDISPASS12345@127.0.0.1:6379/x/y' }, cwd: dir }));
    expect(redis.message).toContain('got "redis://:***@127.0.0.1:6379/x/y"');
    for (const e of [http, proc, redis]) expect(e.message).not.toMatch(/ENVJSONSECRET|PROCSECRET|REDISPASS/);
  });

  it('a TOML syntax error names the file and the line', () => {
    const file = write('syntax.toml', '[server]\nport = 7070\nhost = 127.0.0.1\n');
    const e = configError(() => loadConfig({ file, env: {}, cwd: dir }));
    expect(e.issues).toHaveLength(1);
    expect(e.message).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: line 3, column \\d+: invalid TOML: .+ — fix the syntax there`));
    // A table given twice (a plan's lines pasted after one's own [engine]): which, and where the first is.
    const twice = write('twice.toml', '[engine]\ntargetWaiting = 2\n[server]\nport = 7070\n[engine]\npacer = "stoker"\n');
    expect(configError(() => loadConfig({ file: twice, env: {}, cwd: dir })).message).toMatch(/: line 5, column \d+: invalid TOML: trying to redefine an already defined table or value — \[engine\] is already at line 1: merge the two into one table$/);
  });

  it('a missing file, and a directory given as the file', () => {
    const missing = configError(() => loadConfig({ file: 'nope.toml', env: {}, cwd: dir }));
    expect(missing.message).toBe(`nope.toml: cannot read the config file: not found (${path.join(dir, 'nope.toml')}) — check the --config path, or leave --config out to use the defaults and the environment`);
    expect(configError(() => loadConfig({ file: dir, env: {}, cwd: dir })).message).toContain(`${dir}: cannot read the config file: is a directory`);
  });

  it('a bad pacer name lists the valid ones (and suggests a close one)', () => {
    const file = write('p.toml', '[engine]\npacer = "fastest"\n');
    const e = configError(() => loadConfig({ file, env: {}, cwd: dir }));
    expect(e.message).toBe(`${file}: engine.pacer: expected a built-in pacer name, got "fastest" — use one of: ${PACER_NAMES.join(', ')}`);
    const near = configError(() => loadConfig({ env: { STOKER_ENGINE_PACER: 'stokr' }, cwd: dir }));
    expect(near.message).toContain('STOKER_ENGINE_PACER: engine.pacer: expected a built-in pacer name, got "stokr" — did you mean "stoker"? use one of: stoker, classic');
  });

  it('a port out of range, from each source', () => {
    const file = write('port.toml', '[server]\nport = 70000\n');
    expect(configError(() => loadConfig({ file, env: {}, cwd: dir })).message).toBe(`${file}: server.port: expected an integer from 0 to 65535, got 70000 — use e.g. 7070, or 0 to pick a free port`);
    expect(configError(() => loadConfig({ env: { STOKER_SERVER_PORT: '-1' }, cwd: dir })).message).toContain('STOKER_SERVER_PORT: server.port: expected an integer from 0 to 65535, got -1');
    expect(configError(() => loadConfig({ env: {}, flags: { port: 65536 }, cwd: dir })).message).toContain('--port: server.port: expected an integer from 0 to 65535, got 65536');
    expect(configError(() => loadConfig({ env: {}, flags: { port: 'http' }, cwd: dir })).message).toContain('--port: server.port: expected an integer from 0 to 65535, got "http"');
  });

  it('every problem of every source is reported at once', () => {
    const file = write('m.toml', '[prepare]\nthreads = 0\n');
    const e = configError(() => loadConfig({ file, env: { STOKER_DEVICE_KIND: 'gpu' }, flags: { dataDir: '' }, cwd: dir }));
    expect(e.issues.map((i) => `${i.source} ${i.path}`)).toEqual([`${file} prepare.threads`, 'STOKER_DEVICE_KIND device.kind', '--data dataDir']);
    for (const line of e.message.split('\n')) expect(line).toMatch(/^[^:]+: [\w.]+: expected .+, got .+ — .+/);
  });
});

describe('configToToml', () => {
  it('prints the defaults with "unlimited" and "none" and loads back to the same config', () => {
    const c = loadConfig({ env: {}, cwd: dir });
    const toml = configToToml(c);
    expect(toml).toContain('budgetBytes = "unlimited"');
    expect(toml).toContain('deviceTimeoutS = "none"');
    expect(toml).toContain('[server]\nhost = "127.0.0.1"\nport = 7070\n');
    const file = write('printed/defaults.toml', toml);
    expect(loadConfig({ file, env: {}, cwd: '/' })).toEqual(c);
  });

  it('round-trips a config with every field changed', () => {
    const c: ServeConfig = {
      dataDir: path.join(dir, 'journal dir'),
      server: {
        host: '0.0.0.0', port: 0, bodyLimitBytes: 4096, maxPendingJobs: 3, maxPendingPartitions: 7, retryAfterS: 1, resultTtlS: 0.5, shutdownTimeoutS: 0, maxWaitS: 12.25,
        token: '', allowedHosts: ['stoker.internal', '10.0.0.5'], openWithoutToken: true, requestTimeoutS: 2.5, headersTimeoutS: 1, keepAliveTimeoutS: 0.5, maxConnections: 10, maxEventStreams: 3, tlsCert: '', tlsKey: '',
      },
      engine: { pacer: 'interval-pi', targetWaiting: 1.5, budgetBytes: 412316860416, retries: 10, deviceTimeoutS: 90, prepareTimeoutS: 600, pacerOptions: { kp: 0.25, ki: 0.002 } },
      device: { kind: 'webgpu', workers: 64 },
      prepare: { threads: 7, concurrency: 1 },
      cluster: { redis: 'redis://10.0.0.5:6380/2', lockMs: 5000, heartbeatMs: 500, nodeId: 'gpu-box-1' },
    };
    const file = write('elsewhere/round.toml', configToToml(c));
    expect(loadConfig({ file, env: {}, cwd: '/' })).toEqual(c);
  });

  it('leaves out a process device\'s empty env and an HTTP device\'s empty headers (an empty header read badly), and loads back the same', () => {
    const file = write('empty/stoker.toml', '[device.process]\ncommand = "python3"\nargs = ["dev.py"]\n[devices.api.http]\nurl = "http://127.0.0.1:9/a"\n');
    const c = loadConfig({ file, env: {}, cwd: '/' });
    const toml = configToToml(c);
    expect(toml).not.toContain('[device.process.env]');
    expect(toml).not.toContain('[devices.api.http.headers]');
    expect(loadConfig({ file: write('empty/printed.toml', toml), env: {}, cwd: '/' })).toEqual(c);
    // Given, they are printed.
    const given = loadConfig({ file: write('empty/env.toml', '[device.process]\ncommand = "python3"\n[device.process.env]\nA = "1"\n'), env: {}, cwd: '/' });
    expect(configToToml(given)).toContain('[device.process.env]\nA = "1"');
  });

  it('prints environment and flag overrides as the effective values', () => {
    const c = loadConfig({ env: { STOKER_SERVER_PORT: '8123', STOKER_ENGINE_DEVICE_TIMEOUT_S: '30' }, flags: { host: 'localhost' }, cwd: dir });
    const toml = configToToml(c);
    expect(toml).toContain('host = "localhost"\nport = 8123\n');
    expect(toml).toContain('deviceTimeoutS = 30\n');
    expect(loadConfig({ file: write('eff.toml', toml), env: {}, cwd: '/' })).toEqual(c);
  });
});

describe("loadConfig's own options", () => {
  it('a misspelt option is refused, naming it (value: or flags: { data } were read by nothing, silently)', () => {
    expect(() => loadConfig({ value: {}, cwd: dir } as never)).toThrow('loadConfig(options): value: not an option of loadConfig — did you mean values?: its options are file, values, env, flags, cwd');
    expect(() => loadConfig({ flags: { data: 'x' }, env: {}, cwd: dir } as never)).toThrow('loadConfig(options): flags.data: not an option of loadConfig — did you mean flags.dataDir?');
  });
});

describe('device tables from several sources', () => {
  it('an environment variable sets its fields over the file\'s table, keeping the rest (STOKER_DEVICE_HTTP with a url dropped the file\'s headers and timeout)', () => {
    const file = write('http/stoker.toml', '[device.http]\nurl = "http://127.0.0.1:9/a"\ntimeoutS = 10\nheaders = { Authorization = "Bearer s3cret", Accept = "application/json" }\n[device.batch]\nmaxItems = 8\nmaxWaitMs = 50\n');
    const c = loadConfig({ file, env: { STOKER_DEVICE_HTTP: '{"url":"http://127.0.0.1:9/b"}', STOKER_DEVICE_BATCH: '{"maxItems":16}' }, cwd: '/' });
    expect(c.device.http).toMatchObject({ url: 'http://127.0.0.1:9/b', timeoutS: 10, headers: { Authorization: 'Bearer s3cret', Accept: 'application/json' } });
    expect(c.device.batch).toEqual({ maxItems: 16, maxWaitMs: 50 });
  });

  it('a later source makes the device another type: STOKER_DEVICE_PROCESS over a file\'s [device.http] (both were set, and the error blamed the file); one source giving both is still refused', () => {
    const file = write('switch/stoker.toml', '[device.http]\nurl = "http://127.0.0.1:9/a"\n');
    const c = loadConfig({ file, env: { STOKER_DEVICE_PROCESS: '{"command":"python3"}' }, cwd: '/' });
    expect(c.device.http).toBeUndefined();
    expect(c.device.process).toMatchObject({ command: 'python3' });
    const back = loadConfig({ file: write('switch2/stoker.toml', '[device.process]\ncommand = "python3"\n'), env: { STOKER_DEVICE_HTTP: '{"url":"http://127.0.0.1:9/b"}' }, cwd: '/' });
    expect(back.device.process).toBeUndefined();
    expect(back.device.http).toMatchObject({ url: 'http://127.0.0.1:9/b' });
    // kind = "webgpu" on a device a process or endpoint runs: read by nothing (it was ignored without a word).
    expect(() => loadConfig({ file: write('switch4/stoker.toml', '[devices.web]\nkind = "webgpu"\n[devices.web.http]\nurl = "http://127.0.0.1:9/a"\n'), env: {}, cwd: '/' })).toThrow(/devices\.web\.kind: kind = "webgpu" is for a device whose steps run on stoker's threads, but \[devices\.web\.http\] makes this one an HTTP endpoint/);
    expect(() => loadConfig({ env: { STOKER_PREPARE_THREADS: '100000' }, cwd: '/' })).toThrow(/prepare\.threads: expected an integer from 1 to 1024, got 100000/);
    const both = write('switch3/stoker.toml', '[device.http]\nurl = "http://127.0.0.1:9/a"\n[device.process]\ncommand = "python3"\n');
    expect(() => loadConfig({ file: both, env: {}, cwd: '/' })).toThrow(/both \[device\.process\] and \[device\.http\] are set/);
  });

  it('an environment variable may set only some of the fields over the file\'s table (STOKER_DEVICE_HTTP=\'{"timeoutS":5}\' was refused for want of the url the file gives); with no earlier table, the required one is named', () => {
    const file = write('http3/stoker.toml', '[device.http]\nurl = "http://127.0.0.1:9/a"\ntimeoutS = 10\n[device.batch]\nmaxItems = 8\n');
    const c = loadConfig({ file, env: { STOKER_DEVICE_HTTP: '{"timeoutS":5}', STOKER_DEVICE_BATCH: '{"maxWaitMs":7}' }, cwd: '/' });
    expect(c.device.http).toMatchObject({ url: 'http://127.0.0.1:9/a', timeoutS: 5 });
    expect(c.device.batch).toEqual({ maxItems: 8, maxWaitMs: 7 });
    expect(() => loadConfig({ env: { STOKER_DEVICE_HTTP: '{"timeoutS":5}' }, cwd: '/' })).toThrow(/STOKER_DEVICE_HTTP: device\.http\.url: expected an http:\/\/ or https:\/\/ URL, got nothing — give it in the same variable \("url":"http:\/\/127\.0\.0\.1:8000\/embed"\) or in the config file's \[device\.http\]/);
    expect(() => loadConfig({ env: { STOKER_DEVICE_PROCESS: '{"args":["d.py"]}' }, cwd: '/' })).toThrow(/STOKER_DEVICE_PROCESS: device\.process\.command: expected a program, got nothing/);
    expect(() => loadConfig({ env: { STOKER_DEVICE_BATCH: '{"maxWaitMs":7}' }, cwd: '/' })).toThrow(/STOKER_DEVICE_BATCH: device\.batch\.maxItems: expected an integer ≥ 1, got nothing/);
    // Still strict: a misspelt key is named.
    expect(() => loadConfig({ file, env: { STOKER_DEVICE_HTTP: '{"timeout":5}' }, cwd: '/' })).toThrow(/STOKER_DEVICE_HTTP: device\.http\.timeout: unknown key .*did you mean "timeoutS"\?/);
  });

  it('config print does not print a credential header: blank, named in a comment', () => {
    const file = write('http2/stoker.toml', '[device.http]\nurl = "http://127.0.0.1:9/a"\nheaders = { Authorization = "Bearer s3cret", "X-Api-Key" = "k", Accept = "application/json" }\n');
    const toml = configToToml(loadConfig({ file, env: {}, cwd: '/' }));
    expect(toml).not.toContain('s3cret');
    expect(toml).toContain('# credentials not printed (blank below, *** in a URL): device.http.headers.Authorization, device.http.headers.X-Api-Key — give them again');
    expect(toml).toContain('Accept = "application/json"');
    const proc = write('proc2/stoker.toml', '[device.process]\ncommand = "python3"\nenv = { HF_TOKEN = "hf_s3cret", CUDA_VISIBLE_DEVICES = "1" }\n');
    const printed = configToToml(loadConfig({ file: proc, env: {}, cwd: '/' }));
    expect(printed).not.toContain('hf_s3cret');
    expect(printed).toContain('device.process.env.HF_TOKEN');
    expect(printed).toContain('CUDA_VISIBLE_DEVICES = "1"');
  });

  it('a number given as a string in the file is told to lose its quotes ("use e.g. 7070" did not say so)', () => {
    expect(() => loadConfig({ file: write('quoted/stoker.toml', '[server]\nport = "7070"\n'), env: {}, cwd: '/' })).toThrow('server.port: expected an integer from 0 to 65535, got "7070" — write the number without quotes (7070, not "7070")');
  });

  it('refuses a device URL with credentials in it, showing them as ***, and says to give them as a header (fetch refused it at every step, quoting the password into job errors and logs)', () => {
    const file = write('creds/stoker.toml', '[devices.web.http]\nurl = "http://user:pw-s3cret@127.0.0.1:1/embed?api_key=q-s3cret&x=1"\n');
    let message = '';
    try {
      loadConfig({ file, env: {}, cwd: '/' });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain('devices.web.http.url: expected a URL without user:password@, got "http://***:***@127.0.0.1:1/embed?api_key=***&x=1" — a URL with user:password@ in it cannot be sent');
    expect(message).toContain('headers = { Authorization = "Basic …" }');
    expect(message).not.toContain('s3cret');
    // A token as the user name too.
    expect(() => loadConfig({ file: write('creds2/stoker.toml', '[device.http]\nurl = "https://tok3n@h/x"\n'), env: {}, cwd: '/' })).toThrow(/got "https:\/\/\*\*\*@h\/x"/);
  });

  it('config print does not print a password in the Redis URL nor a key in the device URL: *** and named', () => {
    const file = write('urls/stoker.toml', '[cluster]\nredis = "redis://stoker:r3dispw@10.0.0.5:6379/1"\n[device.http]\nurl = "http://10.0.0.6:8000/infer?model=a&api_key=k3y"\n');
    const toml = configToToml(loadConfig({ file, env: {}, cwd: '/' }));
    expect(toml).not.toContain('r3dispw');
    expect(toml).not.toContain('k3y');
    expect(toml).toContain('redis = "redis://stoker:***@10.0.0.5:6379/1"');
    expect(toml).toContain('url = "http://10.0.0.6:8000/infer?model=a&api_key=***"');
    expect(toml).toContain('# credentials not printed (blank below, *** in a URL): device.http.url (its *** parts), cluster.redis (its *** parts) — give them again');
    // Without credentials the URLs are printed as they were given.
    const plain = configToToml(loadConfig({ file: write('urls2/stoker.toml', '[cluster]\nredis = "redis://10.0.0.5:6379"\n'), env: {}, cwd: '/' }));
    expect(plain).toContain('redis = "redis://10.0.0.5:6379"');
    expect(plain).not.toContain('credentials not printed');
    // A process's credential flags too.
    const proc = configToToml(loadConfig({ file: write('urls3/stoker.toml', '[device.process]\ncommand = "python3"\nargs = ["serve.py", "--api-key=k3y", "--model", "m"]\n'), env: {}, cwd: '/' }));
    expect(proc).not.toContain('k3y');
    expect(proc).toContain('args = [ "serve.py", "--api-key=***", "--model", "m" ]');
    expect(proc).toContain('device.process.args (its *** parts)');
  });
});

describe('[device.process] and [kinds.NAME]', () => {
  it('reads a process device with its defaults; cwd and kind modules relative to the file', () => {
    const file = write('conf/stoker.toml', '[device]\nworkers = 3\n[device.process]\ncommand = "python3"\nargs = ["dev.py", "--fp16"]\ncwd = "../dev"\nenv = { CUDA_VISIBLE_DEVICES = "1" }\n[kinds.embed]\nmodule = "kinds/embed.mjs"\n');
    fs.mkdirSync(path.join(dir, 'dev'));
    const c = loadConfig({ file, env: {}, cwd: '/' });
    expect(c.device).toEqual({ kind: 'cpu', workers: 3, process: { command: 'python3', args: ['dev.py', '--fp16'], env: { CUDA_VISIBLE_DEVICES: '1' }, cwd: path.join(dir, 'dev'), readyTimeoutS: 30, maxFrameBytes: 2 ** 30, handoffDir: fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), handoffMinBytes: 2 ** 20, onWithdraw: 'end', finishTimeoutS: 60 } });
    expect(c.kinds).toEqual([{ name: 'embed', module: path.join(dir, 'conf/kinds/embed.mjs') }]);
    expect(loadConfig({ file: write('back.toml', configToToml(c)), env: {}, cwd: '/' })).toEqual(c);
    // No cwd: the file's folder (`args = ["prover.py"]` beside the file, the server started elsewhere);
    // from the environment, the server's working directory.
    expect(loadConfig({ file: write('beside/stoker.toml', '[devices.gpu.process]\ncommand = "python3"\nargs = ["prover.py"]\n'), env: {}, cwd: '/' }).devices?.['gpu']?.process?.cwd).toBe(path.join(dir, 'beside'));
    expect(loadConfig({ env: { STOKER_DEVICE_PROCESS: '{"command":"node"}' }, cwd: dir }).device.process?.cwd).toBe(dir);
  });

  it('takes the process device from STOKER_DEVICE_PROCESS as JSON; names the field and the fix when wrong', () => {
    const c = loadConfig({ env: { STOKER_DEVICE_PROCESS: '{"command":"node","args":["d.mjs"],"readyTimeoutS":5}' }, cwd: dir });
    expect(c.device.process).toMatchObject({ command: 'node', args: ['d.mjs'], readyTimeoutS: 5, env: {} });
    expect(() => loadConfig({ env: { STOKER_DEVICE_PROCESS: 'python3 d.py' }, cwd: dir })).toThrow(/STOKER_DEVICE_PROCESS: device\.process: expected a JSON object, got "python3 d\.py".* — write e\.g\. STOKER_DEVICE_PROCESS='\{"command":"python3","args":\["device\.py"\]\}'/);
    expect(() => loadConfig({ file: write('nocmd.toml', '[device.process]\nargs = ["d.py"]\n'), env: {}, cwd: dir })).toThrow(/device\.process\.command: expected a program, got nothing — write e\.g\. command = "python3"/);
    expect(() => loadConfig({ file: write('nodir.toml', '[device.process]\ncommand = "x"\ncwd = "missing"\n'), env: {}, cwd: dir })).toThrow(/device\.process\.cwd: .*missing does not exist — give the folder the device's program runs in/);
    expect(() => loadConfig({ file: write('typo.toml', '[device.process]\ncommand = "x"\nargz = []\n'), env: {}, cwd: dir })).toThrow(/device\.process\.argz: unknown key in \[device\.process\] — did you mean "args"\?/);
  });

  it('refuses a [kinds.NAME] without a module, naming the fix', () => {
    expect(() => loadConfig({ file: write('k.toml', '[kinds.embed]\npath = "x.mjs"\n'), env: {}, cwd: dir })).toThrow(/kinds\.embed\.path: unknown key in \[kinds\.embed\] — .*the keys in \[kinds\.embed\] are: module/);
  });
});

describe('kinds and device limits across sources', () => {
  it('a [kinds.NAME] from loadConfig values replaces the file\'s of the same name; --kind files add', () => {
    const file = write('k2.toml', '[kinds.embed]\nmodule = "a.mjs"\n[kinds.other]\nmodule = "o.mjs"\n');
    const c = loadConfig({ file, values: { kinds: { embed: { module: 'b.mjs' } } }, flags: { kinds: ['x.mjs'] }, env: {}, cwd: dir });
    expect(c.kinds).toEqual([
      { name: 'other', module: path.join(dir, 'o.mjs') },
      { name: 'embed', module: path.join(dir, 'b.mjs') },
      { module: path.join(dir, 'x.mjs') },
    ]);
  });

  it('refuses a host that is no host name or address (it was refused as exposed beyond loopback, naming server.token)', () => {
    expect(() => loadConfig({ env: {}, flags: { host: 'not a host!' }, cwd: dir })).toThrow(/--host: server\.host: expected a host name or IP address, got "not a host!"/);
    for (const host of ['127.0.0.1', '::1', '[::]', 'gpu-box_1.internal', 'fe80::1%eth0']) expect(loadConfig({ env: {}, flags: { host }, cwd: dir }).server.host).toBe(host);
  });

  it('takes journal.maxBytes from STOKER_JOURNAL_MAX_BYTES (it was ignored without a word), refusing a bad one', () => {
    expect(loadConfig({ env: { STOKER_JOURNAL_MAX_BYTES: '100000' }, cwd: dir }).journal).toEqual({ maxBytes: 100_000 });
    expect(() => loadConfig({ env: { STOKER_JOURNAL_MAX_BYTES: '1000' }, cwd: dir })).toThrow(/STOKER_JOURNAL_MAX_BYTES: journal\.maxBytes: expected an integer ≥ 65536 \(bytes\), got 1000/);
    expect(() => loadConfig({ env: { STOKER_JOURNAL_MAXBYTES: '100000' }, cwd: dir })).toThrow(/STOKER_JOURNAL_MAXBYTES: unknown setting — did you mean STOKER_JOURNAL_MAX_BYTES\?/);
    expect(CONFIG_DOC).toMatch(/journal\.maxBytes +none +STOKER_JOURNAL_MAX_BYTES/);
  });

  it('refuses timeouts a timer cannot hold', () => {
    expect(() => loadConfig({ file: write('t1.toml', '[device.process]\ncommand = "x"\nreadyTimeoutS = 9999999\n'), env: {}, cwd: dir })).toThrow(/device\.process\.readyTimeoutS: expected a number of seconds > 0, at most 86400, got 9999999/);
    expect(() => loadConfig({ file: write('t2.toml', '[device.http]\nurl = "http://127.0.0.1:1/x"\ntimeoutS = 9999999\n'), env: {}, cwd: dir })).toThrow(/device\.http\.timeoutS: expected a number of seconds > 0 \(at most 86400\) or "none"/);
    expect(loadConfig({ file: write('t3.toml', '[device.http]\nurl = "http://127.0.0.1:1/x"\ntimeoutS = "none"\n'), env: {}, cwd: dir }).device.http?.timeoutS).toBe(Infinity);
    // The server's own timers (past 2^31 − 1 ms setTimeout fires at once: maxWaitS = 1e12 answered a long poll in 5 ms).
    expect(() => loadConfig({ file: write('t4.toml', '[server]\nmaxWaitS = 1e12\n'), env: {}, cwd: dir })).toThrow(/server\.maxWaitS: expected a number of seconds > 0, at most 2147483 \(24\.8 days\), got 1000000000000/);
    expect(() => loadConfig({ env: { STOKER_SERVER_SHUTDOWN_TIMEOUT_S: '1e30' }, cwd: dir })).toThrow(/server\.shutdownTimeoutS: expected a number of seconds ≥ 0, at most 2147483/);
    expect(() => loadConfig({ file: write('t5.toml', '[server]\nresultTtlS = 1e30\n'), env: {}, cwd: dir })).toThrow(/server\.resultTtlS: expected a number of seconds > 0, at most 315360000 \(10 years\)/);
    expect(() => loadConfig({ file: write('t6.toml', '[engine]\ndeviceTimeoutS = 1e9\n'), env: {}, cwd: dir })).toThrow(/engine\.deviceTimeoutS: expected a number of seconds > 0 \(at most 2147483\) or "none"/);
    expect(loadConfig({ file: write('t7.toml', '[server]\nmaxWaitS = 2147483\n'), env: {}, cwd: dir }).server.maxWaitS).toBe(2_147_483);
  });
});

describe('[devices.NAME]', () => {
  it('reads named devices like [device], with their defaults; [kinds.NAME] device names one; config print round-trips', () => {
    fs.mkdirSync(path.join(dir, 'gpu'), { recursive: true });
    const file = write('devs.toml', '[devices.gpu]\nworkers = 4\n[devices.gpu.process]\ncommand = "python3"\ncwd = "gpu"\n[devices.remote.http]\nurl = "http://127.0.0.1:9/x"\n[kinds.embed]\nmodule = "e.mjs"\ndevice = "gpu"\n');
    const c = loadConfig({ file, env: {}, cwd: '/' });
    expect(c.device).toEqual({ kind: 'cpu', workers: 2 });
    expect(c.devices?.['gpu']).toMatchObject({ kind: 'cpu', workers: 4, process: { command: 'python3', args: [], cwd: path.join(dir, 'gpu'), readyTimeoutS: 30 } });
    expect(c.devices?.['remote']).toMatchObject({ workers: 2, http: { url: 'http://127.0.0.1:9/x', timeoutS: Infinity, headers: {} } });
    expect(c.kinds).toEqual([{ name: 'embed', module: path.join(dir, 'e.mjs'), device: 'gpu' }]);
    expect(loadConfig({ file: write('devs-back.toml', configToToml(c)), env: {}, cwd: '/' })).toEqual(c);
  });

  it('config print leaves a default node name out (it was the printing process\'s own, and every node started from the file shared it); a given one stays', () => {
    const c = loadConfig({ file: write('node.toml', '[cluster]\nredis = "redis://127.0.0.1:6390"\n'), env: {}, cwd: '/' });
    expect(c.cluster.nodeId).toMatch(new RegExp(`-${process.pid}$`));
    const printed = configToToml(c);
    expect(printed).not.toMatch(/nodeId/);
    expect(loadConfig({ file: write('node-back.toml', printed), env: {}, cwd: '/' })).toEqual(c);
    const named = loadConfig({ file: write('named.toml', '[cluster]\nredis = "redis://127.0.0.1:6390"\nnodeId = "gpu-box-1"\n'), env: {}, cwd: '/' });
    expect(configToToml(named)).toMatch(/nodeId = "gpu-box-1"/);
  });

  it('refuses a device named "default" and a device with both a process and an http table', () => {
    expect(() => loadConfig({ file: write('d1.toml', '[devices.default]\nworkers = 1\n'), env: {}, cwd: dir })).toThrow(/"default" is \[device\]: give this one another name/);
    expect(() => loadConfig({ file: write('d2.toml', '[devices.x.process]\ncommand = "a"\n[devices.x.http]\nurl = "http://127.0.0.1:1/"\n'), env: {}, cwd: dir })).toThrow(/devices\.x: both \[devices\.x\.process\] and \[devices\.x\.http\] are set/);
  });
});
