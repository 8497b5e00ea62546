/**
 * The client: typed calls on the paths of the schema (`paths` in ./schema.ts, generated
 * from docs/openapi.yaml), with the API key as a Bearer token, typed errors, retries and
 * cursor pagination. It needs nothing but `fetch`.
 */

import { CtxadminError, TransportError, errorFromAnswer } from "./errors.js";
import { RetryPolicy, isIdempotent, type RetryOptions } from "./retry.js";
import type { paths } from "./schema.js";

export type Method = "get" | "put" | "post" | "delete" | "patch";

/** The paths that have an operation for `M`. */
export type PathsWith<M extends Method> = {
  [P in keyof paths]: paths[P] extends { [K in M]: object } ? P : never;
}[keyof paths];

/** The operation of `M` on `P`. */
export type Operation<P extends keyof paths, M extends Method> = paths[P] extends {
  [K in M]: infer O;
}
  ? O
  : never;

type SuccessStatus = 200 | 201 | 202 | 203 | 204 | 206;

type AnswerOf<R> = R extends { content: { "application/json": infer T } }
  ? T
  : R extends { content: Record<string, infer T> }
    ? T
    : undefined;

/** What a successful call of the operation `O` returns (the JSON of its 2xx answers). */
export type Success<O> = O extends { responses: infer R }
  ? { [S in keyof R & SuccessStatus]: AnswerOf<R[S]> }[keyof R & SuccessStatus]
  : never;

type PathOption<O> = O extends { parameters: { path: infer X } }
  ? [X] extends [never | undefined]
    ? { path?: undefined }
    : { path: X }
  : { path?: undefined };

type QueryOption<O> = O extends { parameters: { query?: infer Q } }
  ? [Q] extends [never | undefined]
    ? { query?: undefined }
    : { query?: Q }
  : { query?: undefined };

type JsonBodyOf<B> = B extends { content: { "application/json": infer T } } ? T : never;

type BodyOption<O> = O extends { requestBody: infer B }
  ? [JsonBodyOf<B>] extends [never]
    ? { body?: unknown }
    : { body: JsonBodyOf<B> }
  : O extends { requestBody?: infer B }
    ? [JsonBodyOf<B>] extends [never]
      ? { body?: undefined }
      : { body?: JsonBodyOf<B> }
    : { body?: undefined };

/** Per call: extra headers, an abort signal, and whether a POST may be repeated. */
export interface CallOptions {
  headers?: Record<string, string>;
  signal?: AbortSignal;
  /** Retry this call as an idempotent one (default: by its method). */
  idempotent?: boolean;
}

/** The options of a call of `O`: its path parameters, query, JSON body and call options. */
export type RequestOptions<O> = PathOption<O> & QueryOption<O> & BodyOption<O> & CallOptions;

type OptionalArgument<O> = {} extends RequestOptions<O>
  ? [options?: RequestOptions<O>]
  : [options: RequestOptions<O>];

/** The item of a cursor page `{"results": [...], "next", "previous"}`. */
export type PageItem<T> = T extends { results: (infer I)[] } ? I : never;

/** The GET paths whose answer is a cursor page. */
export type PagedPaths = {
  [P in PathsWith<"get">]: Success<Operation<P, "get">> extends { results: unknown[]; next?: unknown }
    ? P
    : never;
}[PathsWith<"get">];

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface ClientOptions extends RetryOptions {
  /** The service's address, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** An API key (`ctx_…`), sent as `Authorization: Bearer <key>`. */
  apiKey: string;
  /** Headers sent on every call. */
  headers?: Record<string, string>;
  /** Milliseconds one try may take before it is abandoned (default 60000). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: FetchLike;
}

type QueryValue = string | number | boolean | null | undefined | readonly (string | number | boolean)[];

function sleep(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, seconds * 1000);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export class CtxadminClient {
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  private readonly apiKey: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly fetchImpl: FetchLike;

  constructor(options: ClientOptions) {
    if (!options.baseUrl) throw new TypeError("baseUrl is required");
    if (!options.apiKey) throw new TypeError("apiKey is required");
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey;
    this.headers = { ...options.headers };
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.retry = new RetryPolicy(options);
    const found = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (!found) throw new TypeError("no fetch: pass options.fetch");
    this.fetchImpl = found;
  }

  get<P extends PathsWith<"get">>(path: P, ...options: OptionalArgument<Operation<P, "get">>) {
    return this.request("get", path, ...options);
  }

  put<P extends PathsWith<"put">>(path: P, ...options: OptionalArgument<Operation<P, "put">>) {
    return this.request("put", path, ...options);
  }

  post<P extends PathsWith<"post">>(path: P, ...options: OptionalArgument<Operation<P, "post">>) {
    return this.request("post", path, ...options);
  }

  patch<P extends PathsWith<"patch">>(path: P, ...options: OptionalArgument<Operation<P, "patch">>) {
    return this.request("patch", path, ...options);
  }

  delete<P extends PathsWith<"delete">>(path: P, ...options: OptionalArgument<Operation<P, "delete">>) {
    return this.request("delete", path, ...options);
  }

  /**
   * Every item of a cursor-paged list, page after page (each page one GET, retried like
   * any other). The `next` links are followed on this client's own origin only.
   */
  async *paginate<P extends PagedPaths>(
    path: P,
    ...options: OptionalArgument<Operation<P, "get">>
  ): AsyncGenerator<PageItem<Success<Operation<P, "get">>>, void, undefined> {
    const first = (options[0] ?? {}) as RequestOptions<unknown> & { query?: Record<string, QueryValue> };
    let url: string | null = this.url(path, first.path as Record<string, unknown> | undefined, first.query);
    while (url !== null) {
      const page = (await this.send("GET", url, undefined, first)) as {
        results?: unknown;
        next?: string | null;
      };
      if (!page || !Array.isArray(page.results)) {
        throw new CtxadminError("the answer is not a page of results", {
          status: 200,
          code: "unexpected_answer",
        });
      }
      for (const item of page.results) yield item as PageItem<Success<Operation<P, "get">>>;
      url = page.next ? this.sameOrigin(page.next) : null;
    }
  }

  /** A typed call of `method` on `path`; resolves to the JSON of its 2xx answer. */
  async request<M extends Method, P extends PathsWith<M>>(
    method: M,
    path: P,
    ...options: OptionalArgument<Operation<P, M>>
  ): Promise<Success<Operation<P, M>>> {
    const given = (options[0] ?? {}) as RequestOptions<unknown> & { query?: Record<string, QueryValue> };
    const url = this.url(path, given.path as Record<string, unknown> | undefined, given.query);
    return (await this.send(method.toUpperCase(), url, given.body, given)) as Success<Operation<P, M>>;
  }

  private url(path: string, params: Record<string, unknown> | undefined, query?: Record<string, QueryValue>): string {
    const filled = path.replace(/\{([^}]+)\}/g, (_match, name: string) => {
      const value = params?.[name];
      if (value === undefined || value === null) throw new TypeError(`missing path parameter ${name}`);
      return encodeURIComponent(String(value));
    });
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value === undefined || value === null) continue;
      for (const item of Array.isArray(value) ? value : [value]) search.append(name, String(item));
    }
    const text = search.toString();
    return `${this.baseUrl}${filled}${text ? `?${text}` : ""}`;
  }

  /** A page's `next` on this client's origin (the key is never sent to another host). */
  private sameOrigin(next: string): string {
    const target = new URL(next, this.baseUrl);
    return `${this.baseUrl}${target.pathname}${target.search}`;
  }

  private async send(method: string, url: string, body: unknown, call: CallOptions): Promise<unknown> {
    const headers: Record<string, string> = {
      Accept: "application/json",
      ...this.headers,
      ...call.headers,
      Authorization: `Bearer ${this.apiKey}`,
    };
    let payload: string | undefined;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    const idempotent = isIdempotent(method, call.idempotent);
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      const signals = [AbortSignal.timeout(this.timeoutMs), ...(call.signal ? [call.signal] : [])];
      try {
        response = await this.fetchImpl(url, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.any(signals),
        });
      } catch (error) {
        if (call.signal?.aborted) throw error;
        const wait = idempotent ? this.retry.delay(attempt, null, null) : null;
        if (wait === null) {
          const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
          throw new TransportError(`${method} ${new URL(url).pathname}: ${reason}`, { cause: error });
        }
        await sleep(wait, call.signal);
        continue;
      }
      const bytes = new Uint8Array(await response.arrayBuffer());
      if (response.ok) return parseAnswer(response, bytes);
      const text = new TextDecoder().decode(bytes);
      const failure = errorFromAnswer(response.status, response.statusText, response.headers, text);
      const wait = idempotent ? this.retry.delay(attempt, response.status, failure.retryAfter) : null;
      if (wait === null) throw failure;
      await sleep(wait, call.signal);
    }
  }
}

/** A 2xx answer: its JSON, its text, or its bytes (an artifact's raw content). */
function parseAnswer(response: Response, bytes: Uint8Array): unknown {
  if (response.status === 204 || bytes.length === 0) return undefined;
  const type = (response.headers.get("Content-Type") ?? "").toLowerCase();
  if (type.includes("json")) return JSON.parse(new TextDecoder().decode(bytes));
  if (type.startsWith("text/")) return new TextDecoder().decode(bytes);
  return bytes;
}
