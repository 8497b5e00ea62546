// Retries, Retry-After and the origin of `next` links, against a scripted HTTP server: each
// test lists the answers the server gives, in order, and reads back what it was asked.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import {
  CtxadminClient,
  RateLimitedError,
  ServiceUnavailableError,
  TransportError,
  parseRetryAfter,
} from "../dist/esm/index.js";

const KEY = "ctx_scripted0_" + "k".repeat(43);
const SUMMARY = "/api/v1/apps/{app}/";
const SESSIONS = "/api/v1/apps/{app}/users/{user}/sessions";

async function scripted(answers) {
  const asked = [];
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      asked.push({ method: request.method, url: request.url, headers: request.headers, body });
      const [status, headers, payload] = answers.shift() ?? [500, {}, {}];
      response.writeHead(status, { "Content-Type": "application/json", ...headers });
      response.end(JSON.stringify(payload));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const baseUrl = `http://127.0.0.1:${server.address().port}`;
  return { baseUrl, asked, close: () => new Promise((resolve) => server.close(resolve)) };
}

const unavailable = (retryAfter) => [
  503,
  retryAfter === undefined ? {} : { "Retry-After": String(retryAfter) },
  { error: { code: "service_unavailable", message: "Try again.", details: {} } },
];

test("a GET is retried on 503 and 429, then answers, with the key as a Bearer token", async () => {
  const server = await scripted([
    unavailable(0),
    [429, { "Retry-After": "0" }, { error: { code: "rate_limited", message: "Slow.", details: {} } }],
    [200, {}, { app: "a" }],
  ]);
  try {
    const client = new CtxadminClient({ baseUrl: server.baseUrl, apiKey: KEY, backoff: 0 });
    assert.deepEqual(await client.get(SUMMARY, { path: { app: "a" } }), { app: "a" });
    assert.equal(server.asked.length, 3);
    assert.ok(server.asked.every((call) => call.headers.authorization === `Bearer ${KEY}`));
  } finally {
    await server.close();
  }
});

test("a POST is not retried unless marked idempotent", async () => {
  const server = await scripted([unavailable(0), unavailable(0), [201, {}, { session_id: "s" }]]);
  try {
    const client = new CtxadminClient({ baseUrl: server.baseUrl, apiKey: KEY, backoff: 0 });
    const path = { app: "a", user: "u" };
    const error = await client.post(SESSIONS, { path, body: {} }).then(() => null, (e) => e);
    assert.ok(error instanceof ServiceUnavailableError, String(error));
    assert.equal(error.retryAfter, 0);
    assert.equal(server.asked.length, 1);
    const session = await client.post(SESSIONS, { path, body: { session_id: "s" }, idempotent: true });
    assert.deepEqual(session, { session_id: "s" });
    assert.equal(server.asked.length, 3);
    assert.equal(server.asked[2].body, '{"session_id":"s"}');
    assert.equal(server.asked[2].headers["content-type"], "application/json");
  } finally {
    await server.close();
  }
});

test("a Retry-After over the limit is not waited for; retries stop at maxRetries", async () => {
  const server = await scripted([
    [429, { "Retry-After": "3600" }, { error: { code: "rate_limited", message: "Slow.", details: {} } }],
    unavailable(),
    unavailable(),
    unavailable(),
  ]);
  try {
    const client = new CtxadminClient({ baseUrl: server.baseUrl, apiKey: KEY, backoff: 0.001, maxRetries: 2 });
    const limited = await client.get(SUMMARY, { path: { app: "a" } }).then(() => null, (e) => e);
    assert.ok(limited instanceof RateLimitedError, String(limited));
    assert.equal(limited.retryAfter, 3600);
    assert.equal(server.asked.length, 1);
    const down = await client.get(SUMMARY, { path: { app: "a" } }).then(() => null, (e) => e);
    assert.ok(down instanceof ServiceUnavailableError, String(down));
    assert.equal(server.asked.length, 4);
  } finally {
    await server.close();
  }
});

test("an answer without the envelope is still a typed error", async () => {
  const server = await scripted([[502, { "Content-Type": "text/html" }, "<html>bad gateway</html>"]]);
  try {
    const client = new CtxadminClient({ baseUrl: server.baseUrl, apiKey: KEY, maxRetries: 0 });
    const error = await client.get(SUMMARY, { path: { app: "a" } }).then(() => null, (e) => e);
    assert.equal(error.status, 502);
    assert.equal(error.code, "http_502");
  } finally {
    await server.close();
  }
});

test("no answer at all is a TransportError once the retries are spent", async () => {
  const server = await scripted([]);
  await server.close();
  const client = new CtxadminClient({ baseUrl: server.baseUrl, apiKey: KEY, backoff: 0.001, maxRetries: 1 });
  await assert.rejects(client.get(SUMMARY, { path: { app: "a" } }), TransportError);
});

test("a page's next link is followed on the client's own origin only", async () => {
  const server = await scripted([
    [200, {}, { results: [{ session_id: "a" }], next: "http://elsewhere.invalid/api/v1/x?cursor=c2", previous: null }],
    [200, {}, { results: [{ session_id: "b" }], next: null, previous: "p" }],
  ]);
  try {
    const client = new CtxadminClient({ baseUrl: server.baseUrl, apiKey: KEY });
    const seen = [];
    for await (const item of client.paginate(SESSIONS, { path: { app: "a", user: "u" }, query: { limit: 1 } })) {
      seen.push(item.session_id);
    }
    assert.deepEqual(seen, ["a", "b"]);
    assert.deepEqual(
      server.asked.map((call) => call.url),
      ["/api/v1/apps/a/users/u/sessions?limit=1", "/api/v1/x?cursor=c2"],
    );
  } finally {
    await server.close();
  }
});

test("Retry-After is read as seconds or as an HTTP date", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(parseRetryAfter("7", now), 7);
  assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:30 GMT", now), 30);
  assert.equal(parseRetryAfter("Wed, 31 Dec 2025 00:00:00 GMT", now), 0);
  assert.equal(parseRetryAfter("soon", now), null);
  assert.equal(parseRetryAfter(null, now), null);
});
