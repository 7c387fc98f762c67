// Builds the console into ../node/assets/console (committed; the termesh
// binary embeds it). Reproducible: the versions are pinned in
// package-lock.json, the output has no timestamps. Run: npm ci && npm run build
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";

const out = "../node/assets/console";
mkdirSync(out, { recursive: true });
await build({
  entryPoints: ["src/app.js"],
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2020"],
  outfile: `${out}/app.js`,
  legalComments: "none",
  logLevel: "warning",
});
await build({
  entryPoints: ["src/app.css"],
  bundle: true,
  minify: true,
  outfile: `${out}/app.css`,
  legalComments: "none",
  logLevel: "warning",
});
copyFileSync("src/index.html", `${out}/index.html`);
