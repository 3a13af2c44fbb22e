// The identity of a mutator bundle, as Canon computes it.

/** bundleHash is a bundle's hash as Canon names it: the lowercase hex SHA-256 of its bytes (a string is taken as UTF-8). */
export async function bundleHash(src: string | Uint8Array): Promise<string> {
  const bytes = typeof src === 'string' ? new TextEncoder().encode(src) : src;
  const d = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
  return Array.from(d, x => x.toString(16).padStart(2, '0')).join('');
}
