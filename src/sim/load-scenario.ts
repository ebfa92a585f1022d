import fs from 'node:fs';
import path from 'node:path';
import { parseScenario, ScenarioError, type Scenario } from './scenario.js';
import { SCENARIOS } from './scenarios.js';

/**
 * Resolves a scenario spec: a built-in name (see SCENARIOS), or a path (relative to `cwd`, or
 * absolute) to a JSON scenario file. Every problem is a ScenarioError whose message says what
 * to write instead: an unknown name lists the built-ins, bad JSON names the file, an invalid
 * scenario lists each field path.
 */
export function resolveScenario(spec: string, cwd = process.cwd()): Scenario {
  const builtIn = SCENARIOS.get(spec);
  if (builtIn) return builtIn;
  const file = path.resolve(cwd, spec);
  const looksLikePath = spec.includes('/') || spec.includes(path.sep) || spec.endsWith('.json');
  if (!looksLikePath && !fs.existsSync(file)) {
    throw new ScenarioError(`unknown scenario ${JSON.stringify(spec)}: use one of ${[...SCENARIOS.keys()].join(', ')}, or a path to a scenario .json file`);
  }
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'not found' : code === 'EISDIR' ? 'is a directory' : (e as Error).message;
    throw new ScenarioError(`scenario file ${spec} ${why} (${file}); give a path to a .json scenario file, or one of the built-in scenarios: ${[...SCENARIOS.keys()].join(', ')}`);
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw new ScenarioError(`${spec} is not valid JSON: ${(e as Error).message}`);
  }
  return parseScenario(data, spec);
}
