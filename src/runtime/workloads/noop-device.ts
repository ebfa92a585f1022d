/** A device step that does nothing (overhead benchmarks). */
export function run(): null {
  return null;
}
