// Replicache mutators that mirror Canon's built-ins (model/builtins.go):
// the server runs its own, and the client's optimistic result is replaced
// by the server's on the next pull. An app copies these and adds its own.
//
// Keys follow docs/readapi.md: an item is "<collection>/<id>" with its
// data as the value, a scalar "_scalar/<name>".

// mergePatch is RFC 7396, as Canon's item.patch applies it.
function mergePatch(target, patch) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) {
    return patch;
  }
  const out = target !== null && typeof target === 'object' && !Array.isArray(target) ? {...target} : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) {
      delete out[k];
    } else {
      out[k] = mergePatch(out[k], v);
    }
  }
  return out;
}

// spliceAt returns a copy of data with the string at the RFC 6901 pointer
// spliced, or undefined when the server would refuse the splice (no such
// string, indices out of it): an error outcome changes nothing. Indices
// count UTF-16 code units, as JavaScript strings do and as Canon counts.
function spliceAt(data, pointer, index, del, insert) {
  const tokens = pointer === '' ? [] : pointer.slice(1).split('/').map(t => t.replaceAll('~1', '/').replaceAll('~0', '~'));
  if (pointer !== '' && !pointer.startsWith('/')) {
    return undefined;
  }
  const edit = (node, i) => {
    if (i === tokens.length) {
      if (typeof node !== 'string' || index + del > node.length) {
        return undefined;
      }
      return node.slice(0, index) + insert + node.slice(index + del);
    }
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, tokens[i])) {
      return undefined;
    }
    const inner = edit(node[tokens[i]], i + 1);
    if (inner === undefined) {
      return undefined;
    }
    const copy = Array.isArray(node) ? [...node] : {...node};
    copy[tokens[i]] = inner;
    return copy;
  };
  return edit(data, 0);
}

export const mutators = {
  async 'item.put'(tx, {collection, id, data}) {
    await tx.set(`${collection}/${id}`, data);
  },
  async 'item.patch'(tx, {collection, id, data}) {
    const cur = await tx.get(`${collection}/${id}`);
    if (cur === undefined) {
      return; // an error outcome on the server: nothing changes
    }
    if (data !== undefined) {
      await tx.set(`${collection}/${id}`, mergePatch(cur, data));
    }
  },
  async 'item.delete'(tx, {collection, id}) {
    await tx.del(`${collection}/${id}`);
  },
  async 'item.splice'(tx, {collection, id, path = '', index, delete: del = 0, insert = ''}) {
    const cur = await tx.get(`${collection}/${id}`);
    const next = cur === undefined ? undefined : spliceAt(cur, path, index, del, insert);
    if (next !== undefined) {
      await tx.set(`${collection}/${id}`, next);
    }
  },
  async 'project.set'(tx, scalars) {
    for (const [name, value] of Object.entries(scalars)) {
      if (value === null) {
        await tx.del(`_scalar/${name}`);
      } else {
        await tx.set(`_scalar/${name}`, value);
      }
    }
  },
};
