/// <reference types="node" />
// Node-only parts of the client: a storage in a file.

import {appendFile, mkdir, readFile, rename, writeFile} from 'node:fs/promises';
import {dirname} from 'node:path';
import type {Storage} from './storage.js';

/**
 * FileStorage keeps a client's state in one file: a log of JSON batches,
 * one per line, appended and flushed per write, and compacted when it is
 * loaded. A torn last line (a crash during a write) is that batch not
 * written. One process at a time per file.
 */
export class FileStorage implements Storage {
  private chain: Promise<void> = Promise.resolve();

  constructor(readonly path: string) {}

  async load(): Promise<Map<string, unknown>> {
    const data = new Map<string, unknown>();
    let text = '';
    try {
      text = await readFile(this.path, 'utf8');
    } catch (e) {
      if ((e as {code?: string}).code !== 'ENOENT') {
        throw e;
      }
    }
    for (const line of text.split('\n')) {
      if (line === '') {
        continue;
      }
      let batch: [string, unknown][];
      try {
        batch = JSON.parse(line) as [string, unknown][];
      } catch {
        break; // the torn end of an interrupted write
      }
      for (const [k, v] of batch) {
        if (v === null) {
          data.delete(k);
        } else {
          data.set(k, v);
        }
      }
    }
    // Compact: one batch of everything, written aside and renamed.
    await mkdir(dirname(this.path), {recursive: true});
    const tmp = this.path + '.tmp';
    await writeFile(tmp, data.size ? JSON.stringify([...data]) + '\n' : '', {flush: true});
    await rename(tmp, this.path);
    return data;
  }

  write(batch: Map<string, unknown>): Promise<void> {
    const line = JSON.stringify([...batch].map(([k, v]) => [k, v === undefined ? null : v])) + '\n';
    this.chain = this.chain.then(() => appendFile(this.path, line, {flush: true}));
    return this.chain;
  }
}
