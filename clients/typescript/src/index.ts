/** ctxadmin's TypeScript client: see README.md. */

export * from "./client.js";
export * from "./errors.js";
export { RetryPolicy, RETRY_STATUSES, isIdempotent, type RetryOptions } from "./retry.js";
export type { components, operations, paths } from "./schema.js";

import type { components } from "./schema.js";

/** The API's named shapes, e.g. `Schemas["Session"]`. */
export type Schemas = components["schemas"];
