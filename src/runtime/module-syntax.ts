import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * Where a module's syntax error is — `file:line`, the line, a caret under the spot — as `node
 * --check` says it: the error an import throws on Node 20 names neither. '' where it cannot tell.
 */
export function syntaxErrorAt(fileOrUrl: string): string {
  let file = fileOrUrl;
  try {
    if (fileOrUrl.startsWith('file:')) file = fileURLToPath(fileOrUrl);
  } catch {
    return '';
  }
  const r = spawnSync(process.execPath, ['--check', file], { encoding: 'utf8', timeout: 10_000 });
  const lines = (r.stderr ?? '').split('\n');
  const at = lines.findIndex((l) => l.startsWith(`${file}:`));
  if (at < 0) return '';
  return lines
    .slice(at, at + 3)
    .filter((l) => l.trim() !== '')
    .join('\n');
}

/**
 * `import(url)`, rejecting where the module's top-level await can never settle: the event loop
 * ran dry with the import still pending (nothing left could settle it). Node would otherwise just
 * exit, with code 0 and no word: `stoker serve --kind` with such a module looked to a supervisor
 * like a clean stop. (One whose await waits on a live timer or socket still waits with it.)
 */
export async function importSettled(url: string): Promise<Record<string, unknown>> {
  let dry: (() => void) | undefined;
  const never = new Promise<never>((_, reject) => {
    dry = () => reject(new Error('its top-level await never settles (the event loop ran dry while the module loaded: nothing left could settle it)'));
    process.once('beforeExit', dry);
  });
  try {
    return await Promise.race([import(url) as Promise<Record<string, unknown>>, never]);
  } finally {
    if (dry) process.off('beforeExit', dry);
  }
}
