// Bundles the client for browsers with esbuild: dist/canon.min.js (ES
// module, minified, without the application's mutators) and prints its
// size, minified and gzipped. `--size` prints the sizes only, as JSON.
import {build} from 'esbuild';
import {gzipSync} from 'node:zlib';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
if (process.argv.includes('--test-page')) {
  // The page of the browser tests, with its HTML, into build/browser.
  await build({entryPoints: [join(root, 'test', 'browser', 'page.tsx')], bundle: true, format: 'esm', platform: 'browser',
    target: 'es2022', jsx: 'automatic', outfile: join(root, 'build', 'browser', 'page.js')});
  (await import('node:fs')).copyFileSync(join(root, 'test', 'browser', 'index.html'), join(root, 'build', 'browser', 'index.html'));
  process.exit(0);
}
const r = await build({
  entryPoints: [join(root, 'src', 'index.ts')],
  bundle: true,
  minify: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  write: !process.argv.includes('--size'),
  outfile: join(root, 'dist', 'canon.min.js'),
  metafile: false,
});
const out = r.outputFiles?.[0]?.contents;
const bytes = out ?? (await import('node:fs')).readFileSync(join(root, 'dist', 'canon.min.js'));
const size = {minified: bytes.length, gzipped: gzipSync(bytes, {level: 9}).length};
console.log(process.argv.includes('--size') ? JSON.stringify(size) : `dist/canon.min.js: ${size.minified} bytes minified, ${size.gzipped} gzipped`);
