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
