/**
 * When to try a request again and how long to wait. Only idempotent requests are retried
 * (GET, HEAD, OPTIONS, PUT, DELETE, or a request marked `idempotent: true`), on a transport
 * failure or a 429, 502, 503 or 504 answer, at most `maxRetries` times. The wait is the
 * server's `Retry-After` when it gave one (up to `maxRetryAfter` seconds; a longer one is not
 * waited for, the error is thrown), else an exponential backoff with jitter: retry *n*
 * (0-based) waits a random time between half and all of `backoff * 2**n` seconds, capped at
 * `maxBackoff`.
 */

export const RETRY_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504]);
const IDEMPOTENT_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

export interface RetryOptions {
  /** Tries after the first (default 3; 0 turns retries off). */
  maxRetries?: number;
  /** Seconds of the first backoff (default 0.5). */
  backoff?: number;
  /** Seconds at most between two tries without a Retry-After (default 30). */
  maxBackoff?: number;
  /** Seconds at most of a Retry-After to wait for (default 60). */
  maxRetryAfter?: number;
  /** A number in [0, 1) (default Math.random): the jitter's source. */
  random?: () => number;
}

export class RetryPolicy {
  readonly maxRetries: number;
  readonly backoff: number;
  readonly maxBackoff: number;
  readonly maxRetryAfter: number;
  private readonly random: () => number;

  constructor(options: RetryOptions = {}) {
    this.maxRetries = options.maxRetries ?? 3;
    this.backoff = options.backoff ?? 0.5;
    this.maxBackoff = options.maxBackoff ?? 30;
    this.maxRetryAfter = options.maxRetryAfter ?? 60;
    this.random = options.random ?? Math.random;
    if (!(this.maxRetries >= 0) || !(this.backoff >= 0)) {
      throw new RangeError("maxRetries and backoff must not be negative");
    }
  }

  /**
   * Seconds to wait before retry `attempt + 1` (0-based `attempt` is the try that just
   * failed), or null when it is not to be retried. `status` is null for a transport failure.
   */
  delay(attempt: number, status: number | null, retryAfter: number | null): number | null {
    if (attempt >= this.maxRetries) return null;
    if (status !== null && !RETRY_STATUSES.has(status)) return null;
    if (retryAfter !== null) return retryAfter <= this.maxRetryAfter ? retryAfter : null;
    const ceiling = Math.min(this.maxBackoff, this.backoff * 2 ** attempt);
    return ceiling / 2 + this.random() * (ceiling / 2);
  }
}

/** A request may be repeated when it says so, else when its method is idempotent. */
export function isIdempotent(method: string, declared: boolean | undefined): boolean {
  return declared ?? IDEMPOTENT_METHODS.has(method.toUpperCase());
}
