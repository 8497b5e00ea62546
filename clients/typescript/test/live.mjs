// The live stack the tests run against: CTXADMIN_URL, and CTXADMIN_API_KEY, a key of the
// app CTXADMIN_APP with every scope. Missing, the tests fail naming them.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

export function live() {
  const baseUrl = process.env.CTXADMIN_URL;
  const apiKey = process.env.CTXADMIN_API_KEY;
  const app = process.env.CTXADMIN_APP;
  assert.ok(
    baseUrl && apiKey && app,
    "set CTXADMIN_URL, CTXADMIN_API_KEY and CTXADMIN_APP to a running stack and a key of the app",
  );
  return { baseUrl, apiKey, app, user: `u-${randomUUID().slice(0, 8)}` };
}
