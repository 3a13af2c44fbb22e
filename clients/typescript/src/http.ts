// The read and push APIs over HTTP.

import {CanonError} from './errors.js';
import type * as wire from './wire.js';

export type Fetch = typeof globalThis.fetch;

/** Api calls one project's HTTP endpoints. */
export class Api {
  constructor(
    readonly server: string,
    readonly org: string,
    readonly project: string,
    readonly branch: string,
    private readonly token: () => Promise<string>,
    private readonly fetchFn: Fetch,
  ) {}

  get base(): string {
    return `${this.server.replace(/\/+$/, '')}/v1/projects/${encodeURIComponent(this.org)}/${encodeURIComponent(this.project)}`;
  }

  async request(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set('Authorization', `Bearer ${await this.token()}`);
    let r: Response;
    try {
      r = await this.fetchFn(this.base + path, {...init, headers});
    } catch (e) {
      throw new CanonError('network', `${init.method ?? 'GET'} ${path}: ${(e as Error).message}`);
    }
    if (!r.ok) {
      let body: Partial<wire.Error> = {};
      try {
        body = (await r.json()) as wire.Error;
      } catch {}
      const e = body.error;
      throw new CanonError(e?.code ?? `http_${r.status}`, e?.message ?? `${init.method ?? 'GET'} ${path}: HTTP ${r.status}`, {
        status: r.status,
        ...(e?.field !== undefined && {field: e.field}),
        ...(e?.hint !== undefined && {hint: e.hint}),
        ...(r.headers.get('Retry-After') && {hint: `retry after ${r.headers.get('Retry-After')} s`}),
      });
    }
    return r;
  }

  private q(extra: Record<string, string | number | undefined>): string {
    const p = new URLSearchParams();
    p.set('branch', this.branch);
    for (const [k, v] of Object.entries(extra)) {
      if (v !== undefined) {
        p.set(k, String(v));
      }
    }
    return '?' + p.toString();
  }

  /** state reads the branch at version at (latest when undefined) with the item bodies; undefined when the branch has no version. */
  async state(at?: number): Promise<wire.State | undefined> {
    try {
      return (await (await this.request(this.q({items: 'full', at}))).json()) as wire.State;
    } catch (e) {
      if (e instanceof CanonError && e.code === 'branch_not_found') {
        return undefined;
      }
      throw e;
    }
  }

  async versions(from: number, limit = 1000): Promise<wire.Versions | undefined> {
    try {
      return (await (await this.request('/versions' + this.q({from, limit}))).json()) as wire.Versions;
    } catch (e) {
      if (e instanceof CanonError && e.code === 'branch_not_found') {
        return undefined;
      }
      throw e;
    }
  }

  /** blob reads a body by its hash: immutable. */
  async blob(hash: string): Promise<string> {
    return (await this.request(`/blobs/${hash}`)).text();
  }

  async mutation(client: string, id: number): Promise<wire.Mutation> {
    return (await (await this.request(`/clients/${encodeURIComponent(client)}/mutations/${id}` + this.q({}))).json()) as wire.Mutation;
  }

  /** activeBundle reads the mutator bundle Canon has active for the project; undefined when none is deployed. */
  async activeBundle(): Promise<wire.ActiveBundle | undefined> {
    try {
      return (await (await this.request('/mutators')).json()) as wire.ActiveBundle;
    } catch (e) {
      if (e instanceof CanonError && e.code === 'no_bundle') {
        return undefined;
      }
      throw e;
    }
  }

  async push(body: wire.PushRequest): Promise<wire.PushResponse> {
    return (await (
      await this.request('/push', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)})
    ).json()) as wire.PushResponse;
  }
}
