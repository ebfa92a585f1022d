import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));

describe('README example (examples/in-process.mjs, run against the build)', () => {
  it('runs the three jobs, reports the cancelled one, and exits 0', () => {
    const r = spawnSync(process.execPath, ['examples/in-process.mjs'], { cwd: root, encoding: 'utf8', timeout: 30_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('results [ 10240, 20480, 30720 ]');
    expect(r.stdout).toContain('doomed: E_CANCELLED');
    expect(r.stdout).toMatch(/device completions 12/);
  });
});
