import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { main } from '../../src/cli/main.js';

export interface Run {
  code: number;
  out: string;
  err: string;
}

/** Runs the CLI in-process with captured output. */
export async function run(...argv: string[]): Promise<Run> {
  let out = '';
  let err = '';
  const code = await main(argv, { out: (s) => void (out += s), err: (s) => void (err += s) });
  return { code, out, err };
}

/** A temporary directory, removed by the returned cleanup. */
export function tempDir(): { dir: string; file: (name: string, text: string) => string; cleanup: () => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stoker-cli-'));
  return {
    dir,
    file: (name, text) => {
      const p = path.join(dir, name);
      fs.writeFileSync(p, text);
      return p;
    },
    cleanup: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
