/**
 * Optional packages: heavy parts that only some users need (webgpu for the WebGPU device, bullmq
 * and ioredis for cluster mode, p-queue for a benchmark's comparison) are not installed with
 * stoker; the code that needs one imports it on demand and says which package to install.
 */

/** The package a failed import could not find, if that is why it failed. */
export function missingPackage(e: unknown): string | undefined {
  if ((e as { code?: unknown } | null)?.code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  return /Cannot find package '([^']+)'/.exec((e as Error).message)?.[1];
}

/** Imports `load()`; a missing optional package becomes an error saying what needs it and what to install. */
export async function importOptional<T>(load: () => Promise<T>, feature: string, packages: readonly string[]): Promise<T> {
  try {
    return await load();
  } catch (e) {
    const pkg = missingPackage(e);
    if (pkg === undefined || !packages.includes(pkg)) throw e;
    throw new OptionalPackageError(`${feature} needs the optional package${packages.length > 1 ? 's' : ''} ${packages.join(' and ')} (${pkg} is not installed): npm install ${packages.join(' ')}`);
  }
}

/** A feature was asked for whose optional package is not installed; the message says what to install. */
export class OptionalPackageError extends Error {
  override readonly name = 'OptionalPackageError';
  readonly code = 'E_OPTIONAL_PACKAGE';
}

/** Throws an {@link OptionalPackageError} at once (before any work starts) when one of `packages` is not installed. */
export function requireOptional(feature: string, packages: readonly string[]): void {
  for (const pkg of packages) {
    try {
      import.meta.resolve(pkg);
    } catch {
      throw new OptionalPackageError(`${feature} needs the optional package${packages.length > 1 ? 's' : ''} ${packages.join(' and ')} (${pkg} is not installed): npm install ${packages.join(' ')}`);
    }
  }
}
