// Canon's web UI: projects, a project's items and version timeline kept
// live over the websocket, edits pushed on it with their outcomes, any
// past version, and an item's history with diffs. Routes live in the URL
// fragment: #/ (projects), #/p/ORG/PROJECT?branch=&at= (a project, at a
// past version with at=), #/p/ORG/PROJECT/i/COLLECTION/ID?branch= (an
// item's history). #token=… (alone or as a parameter of a route) stores
// the token and is removed from the address bar.

import { api, auth, body, ApiError } from "./api.js";
import { Subscription } from "./live.js";
import { diffLines, hunks } from "./diff.js";

const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");

// h builds an element: h("a", {href: "#/"}, "text", child…). Text is
// always set as text, never parsed as HTML.
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function errorBox(e, what) {
  const msg = e instanceof ApiError ? `${e.code}: ${e.message}` : e.message || String(e);
  return h("div", { class: "error", role: "alert" }, what ? `${what}: ` : "", msg, e.hint ? h("div", { class: "hint" }, e.hint) : null);
}

const enc = encodeURIComponent;
const time = (ts) => new Date(ts).toLocaleTimeString();
const stamp = (ts) => new Date(ts).toISOString().replace("T", " ").replace("Z", " UTC");

function projectHref(org, project, branch, params = {}) {
  const q = new URLSearchParams();
  if (branch && branch !== "main") q.set("branch", branch);
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) q.set(k, String(v));
  const s = q.toString();
  return `#/p/${enc(org)}/${enc(project)}${s ? "?" + s : ""}`;
}

function itemHref(org, project, branch, collection, id) {
  const q = branch && branch !== "main" ? "?branch=" + enc(branch) : "";
  return `#/p/${enc(org)}/${enc(project)}/i/${enc(collection)}/${enc(id)}${q}`;
}

// pretty shows a body: JSON indented (bodies are canonical JSON, with
// sorted keys, so two versions line up), anything else as it is.
function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function compact(v) {
  const s = JSON.stringify(v);
  return s.length > 120 ? s.slice(0, 117) + "…" : s;
}

// ---- Who am I: the client group of this browser, a client per tab ----

function randomId() {
  const b = crypto.getRandomValues(new Uint8Array(9));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function clientGroup() {
  let g = localStorage.getItem("canon.clientGroup");
  if (!g) {
    g = "ui-" + randomId();
    localStorage.setItem("canon.clientGroup", g);
  }
  return g;
}

// claimClient returns this tab's client id: kept across reloads of the
// tab, and held with a Web Lock so that a duplicated tab (which copies the
// session storage) takes another one: two tabs numbering mutations as one
// client would collide.
async function claimClient() {
  let id = sessionStorage.getItem("canon.client");
  if (navigator.locks) {
    for (;;) {
      id = id || "tab-" + randomId();
      const got = await new Promise((resolve) => {
        navigator.locks.request("canon.client." + id, { ifAvailable: true }, (lock) => {
          resolve(lock !== null);
          return lock ? new Promise(() => {}) : undefined; // held while the page lives
        });
      });
      if (got) break;
      id = null;
    }
  } else {
    id = id || "tab-" + randomId();
  }
  sessionStorage.setItem("canon.client", id);
  return id;
}

const me = { group: clientGroup(), client: null };

// ---- Routing ----

function parseRoute() {
  let frag = location.hash.replace(/^#/, "");
  const qi = frag.indexOf("?");
  let path = qi < 0 ? frag : frag.slice(0, qi);
  let qs = qi < 0 ? "" : frag.slice(qi + 1);
  if (!path.startsWith("/")) {
    // "#token=…": parameters without a route.
    qs = path + (qs ? "&" + qs : "");
    path = "/";
  }
  const q = new URLSearchParams(qs);
  if (q.has("token")) {
    auth.set(q.get("token"));
    q.delete("token");
    const rest = q.toString();
    history.replaceState(null, "", "#" + path + (rest ? "?" + rest : ""));
  }
  return { segs: path.split("/").filter(Boolean).map(decodeURIComponent), q };
}

let view = null; // the ProjectView on screen, if any

function render() {
  const { segs, q } = parseRoute();
  renderWho();
  if (!auth.token) {
    closeView();
    showTokenForm();
    return;
  }
  if (segs[0] === "p" && segs.length >= 3) {
    const [, org, project] = segs;
    const branch = q.get("branch") || "main";
    const key = `${org}/${project}@${branch}`;
    if (!view || view.key !== key) {
      closeView();
      view = new ProjectView(org, project, branch);
    }
    if (segs[3] === "i" && segs.length === 6) view.showItem(segs[4], segs[5]);
    else view.showItems(q.has("at") ? Number(q.get("at")) : null);
    return;
  }
  closeView();
  showProjects();
}

function closeView() {
  if (view) view.close();
  view = null;
}

function renderWho() {
  const who = document.getElementById("whoami");
  const out = document.getElementById("signout");
  const c = auth.token ? auth.claims() : null;
  who.textContent = c ? `${c.sub} · org ${c.org} · ${(c.scopes || []).join(", ")}` : "";
  who.title = c?.exp ? "token expires " + stamp(c.exp * 1000) : "";
  out.hidden = !auth.token;
}

document.getElementById("signout").addEventListener("click", () => {
  auth.clear();
  location.hash = "#/";
  render();
});

function setCrumbs(...parts) {
  crumbs.replaceChildren(...parts.flatMap((p, i) => (i ? [" / ", p] : [p])));
}

// Any 401 sends the user back to the token form, saying why.
function authFailed(e) {
  if (e instanceof ApiError && e.status === 401) {
    auth.clear();
    closeView();
    showTokenForm(e);
    return true;
  }
  return false;
}

// ---- Token ----

function showTokenForm(err) {
  setCrumbs();
  renderWho();
  const input = h("textarea", { id: "token", rows: 4, placeholder: "eyJhbGciOi…", spellcheck: "false" });
  const form = h(
    "form",
    {
      class: "card",
      onsubmit: (e) => {
        e.preventDefault();
        const t = input.value.trim();
        if (!t || t.split(".").length !== 3) {
          form.querySelector(".error")?.remove();
          form.append(errorBox(new Error("a token is three dot-separated parts (a JWT): paste the whole of it")));
          return;
        }
        auth.set(t);
        render();
      },
    },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an access token. ", h("code", {}, "canon dev"), " prints a link to this page with its dev token; ",
      h("code", {}, "canon token issue"), " makes others. The token stays in this browser's local storage."),
    input,
    h("button", { type: "submit", id: "use-token" }, "Use this token"),
    err ? errorBox(err, "The token was refused") : null,
  );
  main.replaceChildren(form);
  input.focus();
}

// ---- Projects ----

async function showProjects() {
  const c = auth.claims();
  setCrumbs(h("a", { href: "#/" }, "projects"));
  const list = h("div", { id: "projects" }, h("p", { class: "muted" }, "Loading…"));
  const name = h("input", { id: "open-name", placeholder: "project name", pattern: "[a-z0-9][a-z0-9_-]{0,63}", required: true });
  main.replaceChildren(
    h("section", { class: "card" },
      h("h1", {}, `Projects of ${c?.org ?? "your org"}`),
      list,
      h("form", {
        class: "inline",
        onsubmit: (e) => {
          e.preventDefault();
          location.hash = projectHref(c.org, name.value.trim());
        },
      }, h("label", {}, "Open or start a project ", name), h("button", { type: "submit" }, "Open")),
    ),
  );
  const rows = [];
  try {
    let after;
    do {
      const page = await api.projects(after);
      rows.push(...page.projects);
      after = page.next;
    } while (after && rows.length < 5000);
  } catch (e) {
    if (!authFailed(e)) list.replaceChildren(errorBox(e, "Listing the projects"));
    return;
  }
  if (!rows.length) {
    list.replaceChildren(h("p", { class: "muted" }, "No project yet (or none this token reaches, on the partitions this server holds). Start one below: its first edit creates it."));
    return;
  }
  list.replaceChildren(
    h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "project"), h("th", {}, "branches (head version)"), h("th", {}, "partition"))),
      h("tbody", {}, rows.map((p) =>
        h("tr", {},
          h("td", {}, h("a", { href: projectHref(c.org, p.project), dataset: { project: p.project } }, p.project)),
          h("td", {}, p.branches.map((b) => h("a", { class: "pill", href: projectHref(c.org, p.project, b.name) }, `${b.name} · v${b.version}`))),
          h("td", { class: "num" }, p.partition),
        ))),
    ),
  );
}

// ---- A project ----

// MAX_ROWS bounds the items listed per collection.
const MAX_ROWS = 300;

const itemKey = (collection, id) => `${collection}\u0000${id}`;

// A branch's state as the UI holds it.
function toState(st) {
  const items = new Map();
  for (const [collection, list] of Object.entries(st.collections || {})) {
    for (const it of list) items.set(itemKey(collection, it.id), { collection, ...it });
  }
  return { version: st.version, ts: st.ts, scalars: st.scalars || {}, items };
}

const emptyState = () => ({ version: 0, ts: 0, scalars: {}, items: new Map() });

class ProjectView {
  constructor(org, project, branch) {
    this.org = org;
    this.project = project;
    this.branch = branch;
    this.key = `${org}/${project}@${branch}`;
    this.state = null; // live state
    this.past = new Map(); // version → state promise
    this.timeline = new Map(); // version → version message (or API version)
    this.rejected = []; // rejected messages, newest first
    this.oldest = null; // the oldest version in the timeline
    this.mine = new Map(); // mutation id → {name, what, status, detail}
    this.nextId = null; // the next mutation id of this tab's client on the branch
    this.mode = { kind: "items", at: null };
    this.seq = 0; // renders of the left column; a stale one gives up
    this.build();
    this.ready = this.start();
  }

  build() {
    this.status = h("span", { id: "status", class: "status", dataset: { state: "connecting" } }, "connecting…");
    this.left = h("div", { class: "left" });
    this.outcomes = h("ol", { id: "outcomes", class: "outcomes" });
    this.timelineEl = h("ol", { id: "timeline", class: "timeline" });
    this.older = h("button", { type: "button", id: "older", hidden: true, onclick: () => this.loadOlder() }, "Older versions");
    this.root = h("section", { class: "project" },
      h("div", { class: "project-head" },
        h("h1", {}, `${this.org}/${this.project}`),
        h("label", {}, "branch ", this.branchSelect()),
        this.status),
      h("div", { class: "cols" },
        this.left,
        h("aside", { class: "right" },
          h("section", { class: "card" }, h("h2", {}, "Your edits"),
            h("p", { class: "muted small" }, `client ${me.client} of group ${me.group}`), this.outcomes),
          h("section", { class: "card" }, h("h2", {}, "Timeline"), this.timelineEl, this.older))));
    main.replaceChildren(this.root);
    setCrumbs(h("a", { href: "#/" }, "projects"), h("a", { href: projectHref(this.org, this.project, this.branch) }, this.project));
  }

  // branchSelect lists the project's branches (read again when it gets
  // the focus) and opens the one picked.
  branchSelect() {
    const sel = h("select", {
      id: "branch",
      onchange: () => {
        location.hash = projectHref(this.org, this.project, sel.value);
      },
      onfocus: () => this.loadBranches(sel),
    }, h("option", { value: this.branch }, this.branch));
    this.loadBranches(sel);
    return sel;
  }

  async loadBranches(sel) {
    // Answers may arrive out of order; only the latest request's is shown.
    const seq = (this.branchesSeq = (this.branchesSeq ?? 0) + 1);
    let branches;
    try {
      branches = (await api.branches(this.org, this.project)).branches;
    } catch {
      return; // the select keeps this branch; the page shows the API's errors elsewhere
    }
    if (seq !== this.branchesSeq) return;
    const opts = branches.map((b) => h("option", { value: b.name, selected: b.name === this.branch }, `${b.name} (v${b.version})`));
    if (!branches.some((b) => b.name === this.branch)) {
      opts.unshift(h("option", { value: this.branch, selected: true }, `${this.branch} (no version yet)`));
    }
    sel.replaceChildren(...opts);
  }

  get branchSel() {
    return this.root.querySelector("#branch");
  }

  async start() {
    let st;
    try {
      st = toState(await api.state(this.org, this.project, this.branch));
    } catch (e) {
      if (authFailed(e)) return;
      if (!(e instanceof ApiError && e.code === "branch_not_found")) {
        this.left.replaceChildren(errorBox(e, "Reading the project"));
        return;
      }
      st = emptyState(); // a new project: its first edit creates main
    }
    this.state = st;
    // The list read when the page was drawn may predate this branch's
    // first version (a branch just created): read it again now that the
    // page shows a version, which a later version message would not do.
    if (st.version > 0) this.loadBranches(this.branchSel);
    if (st.version > 0) {
      try {
        const page = await api.versions(this.org, this.project, this.branch, Math.max(1, st.version - 29), 30);
        for (const v of page.versions) this.timeline.set(v.version, v);
        this.oldest = page.versions[0]?.version ?? null;
      } catch (e) {
        if (authFailed(e)) return;
        this.timelineEl.replaceChildren(h("li", {}, errorBox(e, "Reading the versions")));
      }
    }
    if (this.closed) return;
    this.sub = new Subscription(this.org, this.project, this.branch, st.version, {
      onVersion: (m) => this.onVersion(m),
      onReset: () => this.restart(),
      onRejected: (m) => this.onRejected(m),
      onStatus: (s, detail) => this.setStatus(s, detail),
    });
    this.renderTimeline();
    this.renderOutcomes();
    this.renderLeft();
  }

  // restart reloads everything: after a reset, the held state is void.
  async restart() {
    this.sub?.close();
    this.sub = null;
    this.loadBranches(this.branchSel);
    this.timeline.clear();
    this.past.clear();
    this.nextId = null;
    this.ready = this.start();
  }

  close() {
    this.closed = true;
    this.sub?.close();
  }

  setStatus(s, detail) {
    this.status.dataset.state = s;
    this.statusDetail = detail;
    this.renderStatus();
  }

  renderStatus() {
    const s = this.status.dataset.state;
    const at = this.state?.version ? `v${this.state.version}` : "no version yet";
    this.status.textContent = s === "live" ? `live · ${at}` : s + (this.statusDetail ? ` · ${this.statusDetail}` : "");
  }

  onVersion(m) {
    const st = this.state;
    if (m.base || m.version !== st.version + 1) {
      // Version 1 of a branch made from another holds its base's items
      // without listing them (and a version that does not follow the held
      // one cannot be applied to it): read the state again and subscribe
      // from there.
      this.restart();
      return;
    }
    for (const it of m.items) {
      const k = itemKey(it.collection, it.id);
      if (it.op === "delete") st.items.delete(k);
      else st.items.set(k, { collection: it.collection, id: it.id, meta: it.meta || {}, hash: it.hash, size: it.size, version: m.version });
    }
    st.version = m.version;
    st.ts = m.ts;
    st.scalars = m.scalars;
    this.timeline.set(m.version, m);
    if (m.version === 1) this.loadBranches(this.branchSel); // this branch has just begun
    for (const o of m.mutations) {
      if (o.client !== me.client || o.clientGroup !== me.group) continue;
      const rec = this.mine.get(o.id);
      if (rec) Object.assign(rec, { status: o.status, detail: o.status === "error" ? o.error : `in v${m.version}`, version: m.version });
    }
    const last = m.lastIds?.[me.client];
    if (last !== undefined && this.nextId !== null && this.nextId <= last) this.nextId = last + 1;
    this.renderStatus();
    this.renderTimeline();
    this.renderOutcomes();
    if (this.mode.kind === "items" && this.mode.at === null) this.renderLeft();
    if (this.mode.kind === "item" && m.items.some((it) => it.collection === this.mode.collection && it.id === this.mode.id)) {
      this.renderLeft();
    }
  }

  onRejected(m) {
    if (m.branch !== this.branch) return;
    this.rejected.unshift(m);
    this.rejected.length = Math.min(this.rejected.length, 50);
    if (m.client === me.client && m.clientGroup === me.group) {
      const rec = this.mine.get(m.id);
      if (rec) {
        rec.status = "rejected";
        rec.detail = `${m.reason}${m.expectedId ? `, expected id ${m.expectedId}` : ""}: ${m.message}`;
      }
      // A gap: the sequencer expects expectedId next.
      if (m.reason === "gap" && m.expectedId) this.nextId = m.expectedId;
      this.renderOutcomes();
    }
    this.renderTimeline();
  }

  // takeId returns the next mutation id of this tab's client: the one
  // after its last decided mutation on the branch, asked once (edits made
  // while the answer is awaited share it), then counted here.
  async takeId() {
    if (this.nextId === null) {
      this.idLoad ??= nextIdOf(this.org, this.project, this.branch).finally(() => {
        this.idLoad = null;
      });
      const next = await this.idLoad;
      if (this.nextId === null) this.nextId = next;
    }
    return this.nextId++;
  }

  // mutate pushes one mutation and tracks its outcome in "Your edits".
  async mutate(name, args, what) {
    let id;
    try {
      id = await this.takeId();
    } catch (e) {
      if (!authFailed(e)) alertIn(this.outcomes, e);
      return;
    }
    const rec = { name, what, status: "sending", detail: "" };
    this.mine.set(id, rec);
    this.renderOutcomes();
    const m = { client: me.client, id, name, args, ts: Date.now() };
    try {
      let written;
      if (this.sub?.canPush) {
        written = (await this.sub.push(me.group, [m])).mutations[0];
      } else {
        written = (await api.push(this.org, this.project, { branch: this.branch, clientGroup: me.group, mutations: [m] })).mutations[0];
      }
      if (rec.status === "sending") {
        rec.status = "pushed";
        rec.detail = `written at partition ${written.partition}, offset ${written.offset}; waiting for the sequencer`;
      }
    } catch (e) {
      if (authFailed(e)) return;
      if (rec.status !== "sending") {
        // decided already: the outcome came before the answer
      } else if (e.code) {
        // An error answer: nothing was written, the id is free again.
        rec.status = "refused";
        rec.detail = `${e.code}: ${e.message}${e.hint ? ` (${e.hint})` : ""}`;
        this.nextId = null;
      } else {
        // No answer (the connection dropped): it may have been written.
        // The id stays used; if it was not, the next edit is rejected as
        // a gap and the ids start again from the one expected.
        rec.status = "unknown";
        rec.detail = `${e.message}: it may still be applied (watch the timeline)`;
      }
    }
    this.renderOutcomes();
  }

  renderOutcomes() {
    const ids = [...this.mine.keys()].sort((a, b) => b - a).slice(0, 50);
    this.outcomes.replaceChildren(...ids.map((id) => {
      const r = this.mine.get(id);
      return h("li", { dataset: { id, status: r.status } },
        h("span", { class: "badge " + r.status }, r.status),
        ` #${id} ${r.name} ${r.what}`,
        r.detail ? h("div", { class: "detail" }, r.detail) : null);
    }));
    if (!ids.length) this.outcomes.replaceChildren(h("li", { class: "muted" }, "Nothing yet: edit an item."));
  }

  renderTimeline() {
    const versions = [...this.timeline.values()].sort((a, b) => b.version - a.version).slice(0, 200);
    const entries = [];
    for (const r of this.rejected) {
      entries.push(h("li", { class: "rejected", dataset: { client: r.client, id: r.id, reason: r.reason } },
        h("span", { class: "badge rejected" }, "rejected"),
        ` ${r.reason}: ${r.client} #${r.id} ${r.name}`,
        r.expectedId ? ` (expected #${r.expectedId})` : "",
        h("div", { class: "detail" }, r.message)));
    }
    for (const v of versions) {
      const viewed = this.mode.kind === "items" && this.mode.at === v.version;
      entries.push(h("li", { class: viewed ? "version selected" : "version", dataset: { version: v.version } },
        h("a", { href: projectHref(this.org, this.project, this.branch, { at: v.version }), title: "the state at this version" }, `v${v.version}`),
        h("span", { class: "muted" }, ` ${time(v.ts)}`),
        v.base ? h("span", { class: "pill" }, `from ${v.base.branch}@v${v.base.version}`) : null,
        h("ul", {},
          (v.mutations || []).map((o) => h("li", { class: "mutation", dataset: { status: o.status } },
            h("span", { class: "badge " + o.status }, o.status),
            ` ${o.client} #${o.id} ${o.name}`,
            o.error ? h("div", { class: "detail" }, o.error) : null)),
          (v.items || []).map((it) => h("li", { class: "change" },
            `${it.op} `, h("a", { href: itemHref(this.org, this.project, this.branch, it.collection, it.id) }, `${it.collection}/${it.id}`))))));
    }
    if (!entries.length) entries.push(h("li", { class: "muted" }, "No version yet."));
    this.timelineEl.replaceChildren(...entries);
    this.older.hidden = !(this.oldest > 1);
  }

  async loadOlder() {
    const from = Math.max(1, this.oldest - 50);
    try {
      const page = await api.versions(this.org, this.project, this.branch, from, this.oldest - from);
      for (const v of page.versions) this.timeline.set(v.version, v);
      this.oldest = from;
      this.renderTimeline();
    } catch (e) {
      if (!authFailed(e)) alertIn(this.timelineEl, e);
    }
  }

  showItems(at) {
    this.mode = { kind: "items", at };
    setCrumbs(h("a", { href: "#/" }, "projects"), h("a", { href: projectHref(this.org, this.project, this.branch) }, this.project),
      at ? `v${at}` : "latest");
    this.ready.then(() => {
      this.renderTimeline();
      this.renderLeft();
    });
  }

  showItem(collection, id) {
    this.mode = { kind: "item", collection, id };
    this.diffTo = null;
    setCrumbs(h("a", { href: "#/" }, "projects"), h("a", { href: projectHref(this.org, this.project, this.branch) }, this.project),
      `${collection}/${id}`);
    this.ready.then(() => this.renderLeft());
  }

  renderLeft() {
    if (!this.state || this.closed) return;
    if (this.mode.kind === "item") this.renderItem();
    else this.renderItems();
  }

  async renderItems() {
    const seq = ++this.seq;
    const at = this.mode.at;
    let st = this.state;
    let banner = null;
    if (at !== null) {
      if (!this.past.has(at)) this.past.set(at, api.state(this.org, this.project, this.branch, at).then(toState));
      try {
        st = await this.past.get(at);
      } catch (e) {
        this.past.delete(at);
        if (!authFailed(e)) this.left.replaceChildren(errorBox(e, `Reading version ${at}`));
        return;
      }
      if (seq !== this.seq) return; // rendered again meanwhile
      banner = h("div", { id: "past", class: "banner", dataset: { at } },
        `Version ${at} of ${this.state.version}, ${stamp(st.ts)} — read-only. `,
        h("a", { href: projectHref(this.org, this.project, this.branch) }, "Back to the latest"),
        this.branchForm(at));
    }
    const byColl = new Map();
    for (const it of [...st.items.values()].sort((a, b) => (a.collection + "\u0000" + a.id < b.collection + "\u0000" + b.id ? -1 : 1))) {
      if (!byColl.has(it.collection)) byColl.set(it.collection, []);
      byColl.get(it.collection).push(it);
    }
    const scalars = Object.entries(st.scalars);
    const parts = [
      banner,
      scalars.length ? h("dl", { class: "scalars" }, scalars.map(([k, v]) => [h("dt", {}, k), h("dd", {}, compact(v))])) : null,
    ];
    if (!byColl.size) parts.push(h("p", { class: "muted" }, st.version ? "No items at this version." : "This branch has no version yet: add an item below."));
    for (const [coll, items] of byColl) {
      // A long collection shows its first rows (each small body is read
      // once by hash for its preview); any item opens by its address.
      const shown = items.slice(0, MAX_ROWS);
      parts.push(h("h2", {}, coll, h("span", { class: "muted" }, ` ${items.length}`)));
      parts.push(h("table", { class: "items" },
        h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "body"), h("th", {}, "meta"), h("th", {}, "size"), h("th", {}, "written"))),
        h("tbody", {}, shown.map((it) => this.itemRow(it)))));
      if (items.length > shown.length) {
        parts.push(h("p", { class: "muted" }, `and ${items.length - shown.length} more, from ${items[shown.length].id} on (open one at #/p/${this.org}/${this.project}/i/${coll}/ID)`));
      }
    }
    if (at === null) {
      // One form each for the view's life: a version arriving while the
      // user types re-renders the list, never what is typed.
      this.newForm ??= this.newItemForm(byColl.keys().next().value || "notes");
      this.scalarForm ??= this.setScalarForm();
      parts.push(this.newForm, this.scalarForm);
    }
    const box = h("section", { class: "card", id: "items", dataset: { version: st.version } }, ...parts);
    this.left.replaceChildren(box);
  }

  // branchForm starts a branch from a version of this one (branch.create,
  // pushed over HTTP: a socket pushes to its own branch only).
  branchForm(at) {
    const name = h("input", { id: "branch-name", placeholder: "new branch", required: true, size: 14, pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]{0,99}" });
    const err = h("div");
    return h("form", {
      class: "inline",
      onsubmit: async (e) => {
        e.preventDefault();
        const branch = name.value.trim();
        try {
          const id = await nextIdOf(this.org, this.project, branch);
          await api.push(this.org, this.project, {
            branch, clientGroup: me.group,
            mutations: [{ client: me.client, id, name: "branch.create", args: { from: this.branch, version: at }, ts: Date.now() }],
          });
        } catch (x) {
          if (!authFailed(x)) err.replaceChildren(errorBox(x, "Starting the branch"));
          return;
        }
        location.hash = projectHref(this.org, this.project, branch);
      },
    }, h("label", {}, `Start a branch from v${at}: `, name), h("button", { type: "submit", id: "branch-create" }, "Start"), err);
  }

  itemRow(it) {
    const preview = h("td", { class: "preview" }, it.size <= 4096 ? "…" : `(${it.size} bytes)`);
    if (it.size <= 4096) {
      body(this.org, this.project, it.hash).then((t) => {
        preview.textContent = t.length > 160 ? t.slice(0, 157) + "…" : t;
      }, (e) => {
        preview.textContent = "(" + e.message + ")";
      });
    }
    return h("tr", { dataset: { item: `${it.collection}/${it.id}`, version: it.version } },
      h("td", {}, h("a", { href: itemHref(this.org, this.project, this.branch, it.collection, it.id) }, it.id)),
      preview,
      h("td", { class: "meta" }, Object.keys(it.meta || {}).length ? compact(it.meta) : ""),
      h("td", { class: "num" }, it.size),
      h("td", { class: "num" }, h("a", { href: projectHref(this.org, this.project, this.branch, { at: it.version }) }, `v${it.version}`)));
  }

  // setScalarForm sets one of the project's scalars (project.set; null
  // deletes it).
  setScalarForm() {
    const name = h("input", { id: "scalar-name", placeholder: "name", required: true, size: 12 });
    const value = h("input", { id: "scalar-value", placeholder: '"My project"', required: true, size: 30, spellcheck: "false" });
    const err = h("div");
    return h("form", {
      class: "inline scalar",
      onsubmit: (e) => {
        e.preventDefault();
        let v;
        try {
          v = JSON.parse(value.value);
        } catch (x) {
          err.replaceChildren(errorBox(new Error(`the value is not JSON (${x.message}): quote a string, e.g. "My project"`)));
          return;
        }
        err.replaceChildren();
        const n = name.value.trim();
        this.mutate("project.set", { [n]: v }, n);
      },
    }, h("label", {}, "Set a scalar ", name), h("label", {}, "to (JSON) ", value), h("button", { type: "submit", id: "scalar-set" }, "Set"), err);
  }

  newItemForm(coll) {
    const collection = h("input", { id: "new-collection", value: coll, required: true, size: 10 });
    const id = h("input", { id: "new-id", placeholder: "id", required: true, size: 12 });
    const data = h("textarea", { id: "new-data", rows: 3, spellcheck: "false" });
    data.value = '{"text": ""}';
    const err = h("div");
    return h("form", {
      class: "new-item",
      onsubmit: (e) => {
        e.preventDefault();
        let parsed;
        try {
          parsed = JSON.parse(data.value);
        } catch (x) {
          err.replaceChildren(errorBox(new Error(`the data is not JSON (${x.message}): fix it and add again`)));
          return;
        }
        err.replaceChildren();
        const c = collection.value.trim();
        const i = id.value.trim();
        this.mutate("item.put", { collection: c, id: i, data: parsed }, `${c}/${i}`);
        id.value = "";
      },
    }, h("h2", {}, "Add an item"),
    h("div", { class: "row" }, h("label", {}, "collection ", collection), h("label", {}, "id ", id)),
    h("label", {}, "data (JSON) ", data), err,
    h("button", { type: "submit", id: "new-put" }, "Add"));
  }

  async renderItem() {
    const seq = ++this.seq;
    const { collection, id } = this.mode;
    const live = this.state.items.get(itemKey(collection, id));
    let hist;
    try {
      hist = await api.history(this.org, this.project, this.branch, collection, id);
    } catch (e) {
      if (authFailed(e)) return;
      if (!(e instanceof ApiError && e.code === "item_not_found")) {
        this.left.replaceChildren(errorBox(e, "Reading the item's history"));
        return;
      }
      hist = { changes: [], head: this.state.version };
    }
    const edit = await this.editor(collection, id, live);
    const changes = hist.changes;
    const to = changes.find((c) => c.version === this.diffTo) || changes[0];
    const diff = to ? await this.diffView(changes, to) : null;
    if (seq !== this.seq) return; // rendered again meanwhile
    const box = h("section", { class: "card", id: "item", dataset: { item: `${collection}/${id}` } },
      h("h2", {}, `${collection}/${id}`, live ? h("span", { class: "muted" }, ` · written by v${live.version}`) : h("span", { class: "muted" }, " · does not exist now")),
      edit,
      h("h2", {}, "History"),
      changes.length ? h("table", { id: "history" },
        h("thead", {}, h("tr", {}, h("th", {}, "version"), h("th", {}, "time"), h("th", {}, "change"), h("th", {}, "size"), h("th", {}, ""))),
        h("tbody", {}, changes.map((c) => h("tr", { dataset: { version: c.version, op: c.op }, class: c === to ? "selected" : "" },
          h("td", {}, h("a", { href: projectHref(this.org, this.project, this.branch, { at: c.version }) }, `v${c.version}`)),
          h("td", { title: stamp(c.ts) }, time(c.ts)),
          h("td", {}, c.op),
          h("td", { class: "num" }, c.op === "put" ? c.size : ""),
          h("td", {}, h("button", { type: "button", class: "link", onclick: () => { this.diffTo = c.version; this.renderItem(); } }, "diff")))))) : h("p", { class: "muted" }, "This item never existed on this branch."),
      hist.next ? h("p", { class: "muted" }, `Showing the ${changes.length} latest changes.`) : null,
      diff);
    this.left.replaceChildren(box);
  }

  // editor returns the item's edit form. The form lives as long as the
  // user stays on the item: a version that changes the item refreshes the
  // fields only if the user has not typed in them, and says so otherwise.
  async editor(collection, id, live) {
    const key = itemKey(collection, id);
    let ed = this.ed;
    if (!ed || ed.key !== key) {
      ed = this.ed = { key, dirty: false, shown: -1 };
      ed.data = h("textarea", { id: "editor", rows: 10, spellcheck: "false", oninput: () => (ed.dirty = true) });
      ed.meta = h("input", { id: "editor-meta", spellcheck: "false", oninput: () => (ed.dirty = true) });
      ed.err = h("div");
      ed.buttons = h("div", { class: "row" });
      const parse = (el, what) => {
        try {
          return { v: JSON.parse(el.value) };
        } catch (x) {
          ed.err.replaceChildren(errorBox(new Error(`the ${what} is not JSON (${x.message}): fix it and save again`)));
          return null;
        }
      };
      ed.form = h("form", {
        class: "editor",
        onsubmit: (e) => {
          e.preventDefault();
          const d = parse(ed.data, "data");
          const m = d && parse(ed.meta, "meta");
          if (!m) return;
          ed.err.replaceChildren();
          ed.dirty = false;
          this.mutate("item.put", { collection, id, meta: m.v, data: d.v }, `${collection}/${id}`);
        },
      }, h("label", {}, "data (JSON)", ed.data), h("label", {}, "meta (JSON object) ", ed.meta), ed.err, ed.buttons);
    }
    const version = live ? live.version : 0;
    if (version !== ed.shown) {
      if (!ed.dirty) {
        try {
          ed.data.value = live ? pretty(await body(this.org, this.project, live.hash)) : '{"text": ""}';
        } catch (e) {
          ed.err.replaceChildren(errorBox(e, "Reading the body"));
        }
        ed.meta.value = JSON.stringify(live?.meta || {});
        ed.err.replaceChildren();
      } else {
        ed.err.replaceChildren(h("div", { class: "notice" },
          live ? `v${live.version} changed this item while you were editing: saving replaces it.` : "The item was deleted while you were editing: saving creates it again."));
      }
      ed.shown = version;
    }
    ed.buttons.replaceChildren(
      h("button", { type: "submit", id: "save" }, live ? "Save" : "Create"),
      live ? h("button", { type: "button", id: "delete", class: "danger", onclick: () => this.mutate("item.delete", { collection, id }, `${collection}/${id}`) }, "Delete") : null);
    return ed.form;
  }

  // diffView compares a change with the one before it.
  async diffView(changes, to) {
    const i = changes.indexOf(to);
    const from = changes[i + 1];
    const text = async (c) => (c && c.op === "put" ? pretty(await body(this.org, this.project, c.hash)) : "");
    let a;
    let b;
    try {
      [a, b] = await Promise.all([text(from), text(to)]);
    } catch (e) {
      return errorBox(e, "Reading the bodies");
    }
    const title = `${from ? `v${from.version} (${from.op})` : "nothing"} → v${to.version} (${to.op})`;
    const script = diffLines(a ? a.split("\n") : [], b ? b.split("\n") : []);
    const pre = h("pre", { class: "diff" });
    if (!script) {
      pre.append(h("div", { class: "hunk" }, "The versions differ on too many lines to diff; they are shown whole."),
        ...a.split("\n").map((l) => h("div", { class: "del" }, "-" + l)), ...b.split("\n").map((l) => h("div", { class: "add" }, "+" + l)));
    } else {
      const hs = hunks(script);
      if (!hs.length) pre.append(h("div", { class: "hunk" }, "No change in the body (the meta may have changed)."));
      for (const hk of hs) {
        pre.append(h("div", { class: "hunk" }, `@@ -${hk.aStart} +${hk.bStart} @@`));
        for (const l of hk.lines) pre.append(h("div", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : "ctx" }, l.op + l.line));
      }
    }
    return h("div", { id: "diff", dataset: { from: from?.version ?? 0, to: to.version } }, h("h2", {}, "Diff ", h("span", { class: "muted" }, title)), pre);
  }
}

// nextIdOf asks the read API for the id after this tab's client's last
// decided mutation on a branch.
async function nextIdOf(org, project, branch) {
  try {
    return (await api.client(org, project, branch, me.client)).lastMutationID + 1;
  } catch (e) {
    if (e instanceof ApiError && e.code === "branch_not_found") return 1; // nothing decided on the branch yet
    throw e;
  }
}

function alertIn(el, e) {
  el.prepend(h("li", {}, errorBox(e)));
}

// ---- Start ----

me.client = await claimClient();
window.addEventListener("hashchange", render);
render();
