/** CanonError is a refusal by Canon (or the client) with a stable code. */
export class CanonError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details: {field?: string; hint?: string; status?: number; requestId?: string} = {},
  ) {
    super(message);
    this.name = 'CanonError';
  }
}
