import assert from 'node:assert/strict';
import {readFileSync} from 'node:fs';
import {test} from 'node:test';

import {canonical, mergePatch, sha256Hex, splice} from '../src/json.js';
import {builtins, LocalTx, type LocalResult, run} from '../src/mutators.js';
import {Canonical, Layers} from '../src/view.js';

test('canonical JSON is RFC 8785', () => {
  // RFC 8785 section 3.2.2's example and number forms.
  assert.equal(canonical({numbers: [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001], string: '\u20ac$\u000f\nA\'B"\\\\"/', literals: [null, true, false]}),
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}');
  // Members sorted by UTF-16 code units.
  assert.equal(canonical({'\u20ac': 1, '\r': 2, '\ud83d\ude00': 3, '1': 4, 'é': 5}), '{"\\r":2,"1":4,"é":5,"€":1,"😀":3}');
  assert.equal(canonical(-0), '0');
  assert.throws(() => canonical(NaN), /not a JSON number/);
});

test('sha256 of canonical bodies is what Canon addresses them by', async () => {
  assert.equal(await sha256Hex(''), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
});

test('merge patch is RFC 7396', () => {
  assert.deepEqual(mergePatch({a: 'b', c: {d: 'e', f: 'g'}}, {a: 'z', c: {f: null}}), {a: 'z', c: {d: 'e'}});
  assert.deepEqual(mergePatch({a: [1]}, {a: [2]}), {a: [2]});
  assert.deepEqual(mergePatch('x', {a: {b: null}}), {a: {}});
  assert.deepEqual(mergePatch({a: 1}, 'v'), 'v');
});

test('splice counts UTF-16 code units and refuses what Canon refuses', () => {
  assert.deepEqual(splice({t: 'hello'}, '/t', 5, 0, ' world'), {t: 'hello world'});
  assert.deepEqual(splice({a: [{t: 'ab'}]}, '/a/0/t', 1, 1, 'X'), {a: [{t: 'aX'}]});
  assert.deepEqual(splice('😀x', '', 2, 1, 'y'), '😀y');
  assert.throws(() => splice('😀', '', 1, 0, 'x'), /in half/);
  assert.throws(() => splice({t: 'ab'}, '/t', 3, 0, ''), /out of the string/);
  assert.throws(() => splice({t: 1}, '/t', 0, 0, ''), /not a string/);
  assert.throws(() => splice({t: 'a'}, '/u', 0, 0, ''), /no member/);
  assert.deepEqual(splice({'a/b': 'x', '~': 'y'}, '/a~1b', 0, 0, '1'), {'a/b': '1x', '~': 'y'});
});

function exec(name: string, args: unknown, base = new Canonical()): LocalResult {
  const r = run(builtins[name], {org: 'o', project: 'p', branch: 'main', clientGroup: 'g', client: 'c', id: 1, name}, args as never, 0, new Layers(base, []));
  assert.ok(!(r instanceof Promise));
  return r;
}

test('built-ins decide with Canon\'s codes', () => {
  const base = new Canonical();
  base.setItem('todos', 't1', {data: {title: 'x', n: 1}, meta: {owner: 'ann'}});
  const code = (r: LocalResult) => (r.ok ? 'ok' : r.code);
  assert.equal(code(exec('item.put', {collection: 'todos', id: 't2', data: null})), 'ok');
  assert.equal(code(exec('item.put', {collection: 'todos', id: 't2'})), 'invalid_args');
  assert.equal(code(exec('item.put', {collection: 'todos', id: 't2', data: 1, extra: 1})), 'invalid_args');
  assert.equal(code(exec('item.put', {collection: '_bad', id: 't2', data: 1})), 'invalid_args');
  assert.equal(code(exec('item.put', {collection: 'c', id: 'x', data: 'y'.repeat(1 << 20)})), 'too_large');
  assert.equal(code(exec('item.patch', {collection: 'todos', id: 'nope', data: {}})), 'not_found');
  assert.equal(code(exec('item.patch', {collection: 'todos', id: 't1'})), 'invalid_args');
  assert.equal(code(exec('item.patch', {collection: 'todos', id: 't1', meta: 'x'}, base)), 'invalid_args');
  assert.equal(code(exec('item.delete', {collection: 'todos', id: 'nope'})), 'not_found');
  assert.equal(code(exec('item.splice', {collection: 'todos', id: 't1', path: '/n', index: 0}, base)), 'invalid_edit');
  assert.equal(code(exec('item.splice', {collection: 'todos', id: 't1', path: '/title', index: -1}, base)), 'invalid_args');
  assert.equal(code(exec('project.set', {})), 'invalid_args');
  assert.equal(code(exec('project.set', {'1x': 1})), 'invalid_args');
  assert.equal(code(exec('project.set', {big: 'x'.repeat(2000)})), 'too_large');
  const r = exec('item.patch', {collection: 'todos', id: 't1', data: {n: null, done: true}, meta: {tag: 'a'}}, base);
  assert.ok(r.ok);
  assert.deepEqual([...r.writes.items.values()][0], {data: {title: 'x', done: true}, meta: {owner: 'ann', tag: 'a'}});
  // A failed mutator's writes are not kept.
  const t = new LocalTx({org: 'o', project: 'p', branch: 'main', clientGroup: 'g', client: 'c', id: 1, name: 'x'}, 0, new Layers(base, []));
  t.put('a', 'b', 1);
  assert.equal(t.has('a', 'b'), true);
  assert.equal(base.getItem('a', 'b'), undefined);
});

test('src/wire.ts is generated from docs/openapi.yaml', async () => {
  const gen = (await import(new URL('../../scripts/gen-wire.mjs', import.meta.url).href)) as {generate(y: string): string; openapiPath: string};
  const want = gen.generate(readFileSync(gen.openapiPath, 'utf8'));
  const have = readFileSync(new URL('../../src/wire.ts', import.meta.url), 'utf8');
  assert.equal(have, want, 'src/wire.ts differs from docs/openapi.yaml: run `npm run gen` in clients/typescript');
});
