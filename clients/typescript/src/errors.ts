/**
 * The typed errors of an answer: the API's one error envelope
 * `{"error": {"code", "message", "details"}}` mapped to a class by its code, else by its
 * status. A reverse proxy's page without the envelope still gives a typed error, with code
 * `http_<status>`.
 */

export type ErrorDetails = Record<string, unknown>;

export interface CtxadminErrorInit {
  status: number;
  code: string;
  details?: ErrorDetails;
  requestId?: string | null;
  retryAfter?: number | null;
}

/** An error answer of the API (status 400 or above). */
export class CtxadminError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: ErrorDetails;
  /** The server's `X-Request-Id`, to quote when reporting a problem. */
  readonly requestId: string | null;
  /** Seconds the server asked to wait (`Retry-After`), when it said. */
  readonly retryAfter: number | null;

  constructor(message: string, init: CtxadminErrorInit) {
    super(`${init.status} ${init.code}: ${message}`);
    this.name = new.target.name;
    this.status = init.status;
    this.code = init.code;
    this.details = init.details ?? {};
    this.requestId = init.requestId ?? null;
    this.retryAfter = init.retryAfter ?? null;
  }
}

/** 400 or 422: the request is malformed or names something the API refuses. */
export class ValidationError extends CtxadminError {}
/** 401: no key, or a key that is unknown, revoked or expired. */
export class AuthenticationError extends CtxadminError {}
/** 403: the key lacks the scope, or the consent is missing. */
export class PermissionDeniedError extends CtxadminError {}
/** 404: no such object in this app (another app's objects are 404 too). */
export class NotFoundError extends CtxadminError {}
/** 409: the object changed or exists already. */
export class ConflictError extends CtxadminError {}
/** 409 `stale_session`: the session changed since the revision sent; nothing was written. */
export class StaleSessionError extends ConflictError {}
/** 409 `session_exists`. */
export class SessionExistsError extends ConflictError {}
/** 409 `event_id_conflict`: an event id reused for a different event. */
export class EventIdConflictError extends ConflictError {}
/** 413: the body is over the server's limit. */
export class RequestTooLargeError extends CtxadminError {}
/** 429: slow down (`retryAfter` seconds when the server said). */
export class RateLimitedError extends CtxadminError {}
/** 5xx. */
export class ServerError extends CtxadminError {}
/** 503: a dependency is down for now (`retryAfter` seconds when the server said). */
export class ServiceUnavailableError extends ServerError {}

/** The request got no answer: connection refused or reset, DNS, a timeout. */
export class TransportError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TransportError";
  }
}

const BY_CODE: Record<string, typeof CtxadminError> = {
  stale_session: StaleSessionError,
  session_exists: SessionExistsError,
  event_id_conflict: EventIdConflictError,
};

const BY_STATUS: Record<number, typeof CtxadminError> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: RequestTooLargeError,
  422: ValidationError,
  429: RateLimitedError,
  503: ServiceUnavailableError,
};

/** The class for an error answer of `status` with the envelope's `code`. */
export function errorClass(status: number, code: string): typeof CtxadminError {
  return BY_CODE[code] ?? BY_STATUS[status] ?? (status >= 500 ? ServerError : CtxadminError);
}

/**
 * Seconds from a `Retry-After` header: delta-seconds or an HTTP date (null when absent or
 * unreadable; never negative).
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | null {
  if (!value) return null;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Math.max(0, Number(text));
  const when = Date.parse(text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, (when - now) / 1000);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The typed error of an answer of 400 or above, from its status, headers and body text. */
export function errorFromAnswer(status: number, statusText: string, headers: Headers, text: string): CtxadminError {
  let code = `http_${status}`;
  let message = statusText || "error";
  let details: ErrorDetails = {};
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  const envelope = isRecord(body) ? body.error : null;
  if (isRecord(envelope)) {
    if (typeof envelope.code === "string" && envelope.code) code = envelope.code;
    if (typeof envelope.message === "string" && envelope.message) message = envelope.message;
    if (isRecord(envelope.details)) details = envelope.details;
  }
  const Class = errorClass(status, code);
  return new Class(message, {
    status,
    code,
    details,
    requestId: headers.get("X-Request-Id"),
    retryAfter: parseRetryAfter(headers.get("Retry-After")),
  });
}
