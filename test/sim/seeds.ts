/** What the many-seed simulator tests share: the seeds, a mean, and a built-in scenario by name. */
import { SCENARIOS, type Scenario } from '../../src/sim/index.js';

/** Claims about the pacer hold over these seeds, not one. */
export const SEEDS = Array.from({ length: 10 }, (_, i) => i + 1);

export const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

/** A built-in scenario (a missing one is a test bug, said so). */
export function scenario(name: string): Scenario {
  const s = SCENARIOS.get(name);
  if (!s) throw new Error(`no built-in scenario ${name}`);
  return s;
}
