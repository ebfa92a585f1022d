/** Stable error codes. Each message says what was wrong and what to do about it. */
export type StokerErrorCode =
  | 'E_INVALID_JOB'
  | 'E_DUPLICATE_JOB'
  | 'E_DUPLICATE_KEY'
  | 'E_OVERSIZE'
  | 'E_TIME_BACKWARDS'
  | 'E_INVALID_EVENT'
  | 'E_INVALID_OPTION'
  | 'E_UNKNOWN_PACER'
  | 'E_PREPARE_FAILED'
  | 'E_DEVICE_FAILED'
  | 'E_DEADLINE'
  | 'E_CANCELLED'
  | 'E_FINISH_FAILED'
  | 'E_RUNTIME_FAILED';

/** The one error class of the core: `code` is stable, `message` says what to do. */
export class StokerError extends Error {
  override readonly name = 'StokerError';
  constructor(
    readonly code: StokerErrorCode,
    message: string,
  ) {
    super(message);
  }
}
