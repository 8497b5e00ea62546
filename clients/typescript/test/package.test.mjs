// What the package promises: nothing to install at run time, and both builds reachable by
// its name (ES import and CommonJS require).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));

test("the package has no runtime dependency", () => {
  for (const field of ["dependencies", "peerDependencies", "optionalDependencies", "bundleDependencies"]) {
    assert.equal(manifest[field], undefined, `package.json has ${field}`);
  }
});

test("its name resolves to the ES build for import and the CommonJS build for require", async () => {
  const imported = await import(manifest.name);
  const required = createRequire(import.meta.url)(manifest.name);
  assert.notEqual(imported.CtxadminClient, required.CtxadminClient);
  assert.equal(typeof imported.CtxadminClient, "function");
  assert.equal(typeof required.CtxadminClient, "function");
  assert.equal(new required.NotFoundError("gone", { status: 404, code: "not_found" }).name, "NotFoundError");
});
