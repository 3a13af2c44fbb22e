// Canon's public HTTP API, as the UI uses it: the read API (docs/readapi.md)
// and the push API (docs/ingest.md), with the token kept in localStorage.

const TOKEN_KEY = "canon.token";

// ApiError is an error answer: {"error": {code, message, field, hint}}.
export class ApiError extends Error {
  constructor(status, e) {
    super(e?.message || `HTTP ${status}`);
    this.status = status;
    this.code = e?.code || "http_" + status;
    this.field = e?.field || "";
    this.hint = e?.hint || "";
  }
}

export const auth = {
  get token() {
    return localStorage.getItem(TOKEN_KEY) || "";
  },
  set(token) {
    localStorage.setItem(TOKEN_KEY, token.trim());
  },
  clear() {
    localStorage.removeItem(TOKEN_KEY);
  },
  // claims decodes the token's payload (not verified: the server does).
  claims() {
    return decodeClaims(this.token);
  },
};

// decodeClaims returns a JWT's claims, or null if it is not one.
export function decodeClaims(token) {
  const part = token.split(".")[1];
  if (!part) return null;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
    const bin = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
    const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

// request sends a request with the token and returns the JSON (or text)
// answer; an error answer throws an ApiError.
export async function request(path, { method = "GET", body, signal } = {}) {
  const headers = { Authorization: "Bearer " + auth.token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    signal,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const type = resp.headers.get("Content-Type") || "";
  if (!resp.ok) {
    let e = null;
    if (type.startsWith("application/json")) {
      try {
        e = (await resp.json()).error;
      } catch {
        // not the documented shape: the status says enough
      }
    }
    throw new ApiError(resp.status, e);
  }
  return type.startsWith("application/json") ? resp.json() : resp.text();
}

const enc = encodeURIComponent;

export function projectPath(org, project) {
  return `/v1/projects/${enc(org)}/${enc(project)}`;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

export const api = {
  projects: (after) => request("/v1/projects" + query({ after, limit: 200 })),
  state: (org, project, branch, at) =>
    request(projectPath(org, project) + query({ branch, at })),
  branches: (org, project) => request(projectPath(org, project) + "/branches"),
  versions: (org, project, branch, from, limit) =>
    request(projectPath(org, project) + "/versions" + query({ branch, from, limit })),
  item: (org, project, branch, collection, id, at) =>
    request(`${projectPath(org, project)}/items/${enc(collection)}/${enc(id)}` + query({ branch, at })),
  history: (org, project, branch, collection, id, before) =>
    request(`${projectPath(org, project)}/items/${enc(collection)}/${enc(id)}/history` + query({ branch, before })),
  push: (org, project, body) =>
    request(projectPath(org, project) + "/push", { method: "POST", body }),
};

// Bodies are immutable by hash: kept once fetched.
const bodies = new Map();

// body returns the text of a body by its hash.
export function body(org, project, hash) {
  const key = `${org}/${project}/${hash}`;
  let p = bodies.get(key);
  if (!p) {
    p = request(`${projectPath(org, project)}/blobs/${hash}`);
    p.catch(() => bodies.delete(key));
    bodies.set(key, p);
  }
  return p;
}
