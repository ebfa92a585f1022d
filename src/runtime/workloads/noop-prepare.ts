/** A preparation that does nothing (overhead benchmarks). */
export function prepare(): null {
  return null;
}
