// The README's TypeScript quickstart runs against the live stack as printed (with the
// stack's address and app in place of make run's), importing this package by its name.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { live } from "./live.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

test("the README's TypeScript quickstart works", () => {
  const { baseUrl, apiKey, app } = live();
  const readme = readFileSync(join(root, "..", "..", "README.md"), "utf8");
  const found = /The same with the TypeScript client.*?```ts\n(.*?)```/s.exec(readme);
  assert.ok(found, "the README has no TypeScript quickstart");
  const code = found[1].replace("http://127.0.0.1:8000", baseUrl).replace('"demo"', JSON.stringify(app));
  // Inside the package, so that "ctxadmin-client" resolves to it (dist is not committed).
  const script = join(root, "dist", "readme-quickstart.mjs");
  writeFileSync(script, code);
  try {
    const printed = execFileSync(process.execPath, [script], {
      env: { ...process.env, CTXADMIN_API_KEY: apiKey },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.match(printed, /Alice prefers window seats/);
  } finally {
    rmSync(script, { force: true });
  }
});
