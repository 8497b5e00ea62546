// The committed types (src/schema.ts) are what openapi-typescript makes of the committed
// schema (docs/openapi.yaml), and the typed calls compile (test/types.check.ts).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);

test("src/schema.ts is generated from docs/openapi.yaml as committed", () => {
  const scratch = mkdtempSync(join(tmpdir(), "ctxadmin-types-"));
  try {
    const generated = join(scratch, "schema.ts");
    const cli = join(dirname(require.resolve("openapi-typescript/package.json")), "bin", "cli.js");
    // The options of `npm run generate`, with the output sent to the scratch file.
    const script = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).scripts.generate;
    const words = script.split(/\s+/);
    assert.equal(words[0], "openapi-typescript");
    const options = words.slice(1).map((word, i, all) => (all[i - 1] === "--output" ? generated : word));
    execFileSync(process.execPath, [cli, ...options], { cwd: root, stdio: "pipe" });
    const committed = readFileSync(join(root, "src", "schema.ts"), "utf8");
    assert.ok(
      readFileSync(generated, "utf8") === committed,
      "src/schema.ts differs from the types of docs/openapi.yaml: run `make schema` (or `npm run generate` in clients/typescript)",
    );
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});

test("the typed calls accept what the schema says and refuse what it does not", () => {
  const tsc = require.resolve("typescript/bin/tsc");
  try {
    execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.test.json")], { stdio: "pipe" });
  } catch (error) {
    assert.fail(`tsc -p tsconfig.test.json:\n${error.stdout}${error.stderr}`);
  }
});
