// Canon's web UI: projects, a project's items and version timeline kept
// live, edits made through @canon/client (canon.js: optimistic, kept in
// IndexedDB until Canon decides them) with their outcomes, any past
// version, and an item's history with diffs. Routes live in the URL
// fragment: #/ (projects), #/p/ORG/PROJECT?branch=&at= (a project, at a
// past version with at=), #/p/ORG/PROJECT/i/COLLECTION/ID?branch= (an
// item's history). #token=… (alone or as a parameter of a route) stores
// the token and is removed from the address bar.

import { api, auth, body, ApiError } from "./api.js";
import { Canon, canonical } from "./canon.js";
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
    else if (k === "dataset") {
      for (const [dk, dv] of Object.entries(v)) if (dv !== undefined && dv !== null && dv !== false) el.dataset[dk] = dv === true ? "" : String(dv);
    }
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
  const msg = e.code ? `${e.code}: ${e.message}` : e.message || String(e);
  const hint = e.hint || e.details?.hint; // an ApiError's, or a CanonError's (the client's)
  return h("div", { class: "error", role: "alert" }, what ? `${what}: ` : "", msg, hint ? h("div", { class: "hint" }, hint) : null);
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

// ---- Who am I ----

// Each open project has a @canon/client (canon.js, the TypeScript client's
// browser build): it numbers this tab's mutations, keeps them in IndexedDB
// until Canon decides them, and applies them to its view at once.

function randomId() {
  const b = crypto.getRandomValues(new Uint8Array(9));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

// describe names what a built-in mutation edits, for "Your edits".
function describe(name, args) {
  if (name.startsWith("item.")) return `${args?.collection}/${args?.id}`;
  if (name === "project.set") return Object.keys(args || {}).join(", ");
  return "";
}

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
    this.state = null; // the canonical state's item list (versions, hashes, sizes), as the timeline has it
    this.local = null; // the client's view: canonical plus pending edits
    this.past = new Map(); // version → state promise
    this.timeline = new Map(); // version → version event (or API version)
    this.rejected = []; // rejected events, newest first
    this.oldest = null; // the oldest version in the timeline
    this.pending = []; // the client's queue: [{id, name, args, state}]
    this.argsOf = new Map(); // mutation id → {name, args}, for outcomes
    this.decided = []; // this tab's decided or refused edits, newest first
    this.mode = { kind: "items", at: null };
    this.seq = 0; // renders of the left column; a stale one gives up
    this.buffer = null; // version events that arrive while the state is read
    this.stateSeq = 0;
    this.ready = new Promise((resolve) => (this.readyResolve = resolve));
    this.build();
    this.start();
  }

  build() {
    this.status = h("span", { id: "status", class: "status", dataset: { state: "connecting" } }, "connecting…");
    this.left = h("div", { class: "left" });
    this.who = h("p", { id: "who", class: "muted small" }, "opening this tab's client…");
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
          h("section", { class: "card" }, h("h2", {}, "Your edits"), this.who, this.outcomes),
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

  // start opens the client of this branch. Its view (canonical state plus
  // this tab's pending edits) fills the items; its events fill the
  // timeline and "Your edits".
  start() {
    let canon;
    try {
      canon = new Canon({
        server: location.origin,
        token: auth.token,
        org: this.org,
        project: this.project,
        branch: this.branch,
        onError: (e) => this.onClientError(e),
        onStatus: () => this.renderStatus(),
      });
    } catch (e) {
      this.left.replaceChildren(errorBox(e, "Opening the project"));
      return;
    }
    this.canon = canon;
    this.offEvents = canon.listen((e) => this.onEvent(e));
    this.offView = canon.subscribe(
      (tx) => ({ scalars: tx.scalars(), items: tx.collections().flatMap((c) => tx.collection(c).map((it) => ({ collection: c, ...it }))) }),
      (v) => {
        this.local = v;
        this.renderLive();
      });
    canon.storageLoaded().then(() => {
      this.who.textContent = `client ${canon.clientID} of group ${canon.clientGroup}`;
      this.who.dataset.client = canon.clientID;
      this.setPending(canon.pendingMutations());
    }, (e) => this.left.replaceChildren(errorBox(e, "Opening the browser's storage (IndexedDB)")));
  }

  close() {
    this.closed = true;
    this.offEvents?.();
    this.offView?.();
    this.canon?.close();
  }

  // onClientError shows what the client cannot fix itself; a refused
  // token brings the sign-in page back.
  onClientError(e) {
    if (this.closed) return;
    if (e.details?.status === 401 || e.code === "close_4001" || e.code === "unauthenticated" || e.code === "token_expired") {
      authFailed(Object.assign(new ApiError(401, { code: e.code, message: e.message, hint: e.details?.hint }), {}));
      return;
    }
    // What the client handles itself needs no word here.
    if (e.code === "version_gap" || e.code === "push_unavailable") return;
    this.problem = e;
    this.renderStatus();
    this.renderOutcomes();
  }

  onEvent(e) {
    if (this.closed) return;
    switch (e.type) {
      case "state":
        this.loadState(e.version);
        break;
      case "version":
        if (this.buffer) this.buffer.push(e);
        else this.onVersion(e);
        break;
      case "rejected":
        this.onRejected(e);
        break;
      case "pending":
        this.setPending(e.pending);
        break;
      case "outcome": {
        this.problem = null; // an edit went through: what was reported is over
        const a = this.argsOf.get(e.id);
        this.decided.unshift({ ...e, what: a ? describe(a.name, a.args) : "" });
        this.decided.length = Math.min(this.decided.length, 50);
        this.renderOutcomes();
        break;
      }
    }
  }

  setPending(pending) {
    this.pending = pending;
    for (const p of pending) this.argsOf.set(p.id, { name: p.name, args: p.args });
    this.renderOutcomes();
    this.renderStatus();
    this.renderLive();
  }

  // loadState reads the item list of the branch at the version the
  // client's view was (re)loaded at, and the timeline before it; the
  // versions that arrive meanwhile are applied after it.
  async loadState(version) {
    const seq = ++this.stateSeq;
    this.buffer = [];
    let st;
    try {
      st = version > 0 ? toState(await api.state(this.org, this.project, this.branch, version)) : emptyState();
    } catch (e) {
      if (seq !== this.stateSeq) return;
      if (authFailed(e)) return;
      if (!(e instanceof ApiError && e.code === "branch_not_found")) {
        this.buffer = null;
        this.left.replaceChildren(errorBox(e, "Reading the project"));
        return;
      }
      st = emptyState();
    }
    let page = null;
    if (st.version > 0) {
      try {
        page = await api.versions(this.org, this.project, this.branch, Math.max(1, st.version - 29), 30);
      } catch (e) {
        if (authFailed(e)) return;
        this.timelineEl.replaceChildren(h("li", {}, errorBox(e, "Reading the versions")));
      }
    }
    if (seq !== this.stateSeq || this.closed) return;
    this.state = st;
    this.timeline.clear();
    this.past.clear();
    for (const v of page?.versions ?? []) this.timeline.set(v.version, v);
    this.oldest = page?.versions[0]?.version ?? null;
    // The list read when the page was drawn may predate this branch's
    // first version (a branch just created): read it again.
    if (st.version > 0) this.loadBranches(this.branchSel);
    const later = this.buffer;
    this.buffer = null;
    for (const m of later) this.onVersion(m);
    this.readyResolve();
    this.renderTimeline();
    this.renderOutcomes();
    this.renderStatus();
    this.renderLeft();
  }

  renderStatus() {
    const s = this.canon?.status ?? "connecting";
    const state = { online: "live", offline: "reconnecting", polling: "polling", connecting: "connecting", closed: "closed" }[s] ?? s;
    this.status.dataset.state = state;
    const at = this.canon?.version ? `v${this.canon.version}` : "no version yet";
    const queued = this.pending.length ? ` · ${this.pending.length} pending` : "";
    const detail = {
      live: at,
      reconnecting: `offline, edits are kept and sent on reconnect (resumes from ${at})`,
      polling: `over HTTP (no websocket), ${at}`,
      connecting: `connecting… (${at})`,
      closed: this.problem ? `closed: ${this.problem.code}: ${this.problem.message}` : "closed",
    }[state];
    this.status.textContent = `${state} · ${detail}${queued}`;
    this.status.title = this.problem ? `${this.problem.code}: ${this.problem.message}` : "";
  }

  onVersion(m) {
    const st = this.state;
    if (!st || m.version <= st.version) return; // in the state read already
    if (m.version !== st.version + 1) {
      // A version that does not follow the list held: read it again.
      this.loadState(this.canon.version);
      return;
    }
    if (m.base) {
      // Version 1 of a branch made from another holds its base's items
      // without listing them: read the list at it.
      this.buffer = [];
      this.loadState(m.version);
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
    this.renderStatus();
    this.renderTimeline();
    if (this.mode.kind === "items" && this.mode.at === null) this.renderLeft();
    if (this.mode.kind === "item" && m.items.some((it) => it.collection === this.mode.collection && it.id === this.mode.id)) {
      this.renderLeft();
    }
  }

  onRejected(m) {
    this.rejected.unshift(m);
    this.rejected.length = Math.min(this.rejected.length, 50);
    // This tab's own (other than a gap, which the client resends) also
    // rejects its mutate(): "Your edits" shows it from there.
    this.renderTimeline();
  }

  // mutate runs a built-in mutator through the client: the view shows the
  // edit at once, "Your edits" follows it to its canonical outcome.
  mutate(name, args) {
    if (!this.canon) return;
    this.canon.mutate[name](args).then(
      (o) => {
        if (o.status === "error") this.flash = `${name} ${describe(name, args)} was rolled back: ${o.code}: ${o.message}`;
      },
      (e) => {
        // Canon refused to record it (or the client could not): it is
        // rolled back and its id used by the next edit.
        this.decided.unshift({ status: "refused", name, what: describe(name, args), code: e.code, message: e.message, hint: e.details?.hint });
        this.renderOutcomes();
      });
  }

  renderOutcomes() {
    const rows = [];
    for (const p of [...this.pending].reverse()) {
      rows.push(h("li", { dataset: { id: p.id, status: p.state } },
        h("span", { class: "badge " + p.state }, p.state === "local" ? "saving" : p.state),
        ` #${p.id} ${p.name} ${describe(p.name, p.args)}`,
        h("div", { class: "detail" }, {
          local: "applied here, being stored in this browser",
          queued: "applied here, stored; waiting to be sent",
          sent: "applied here, sent; waiting for Canon's version",
        }[p.state])));
    }
    for (const d of this.decided) {
      let detail = "";
      if (d.status === "applied") detail = `in v${d.version}`;
      else if (d.status === "error") detail = `in v${d.version}, rolled back: ${d.code}: ${d.message}`;
      else if (d.status === "refused") detail = `${d.code}: ${d.message}${d.hint ? ` (${d.hint})` : ""} (rolled back)`;
      rows.push(h("li", { dataset: { id: d.id ?? "", status: d.status } },
        h("span", { class: "badge " + d.status }, d.status),
        d.id ? ` #${d.id}` : "", ` ${d.name} ${d.what}`,
        h("div", { class: "detail" }, detail)));
    }
    if (this.problem) rows.unshift(h("li", { id: "problem" }, errorBox(this.problem, "The client")));
    this.outcomes.replaceChildren(...rows.slice(0, 80));
    if (!rows.length) this.outcomes.replaceChildren(h("li", { class: "muted" }, "Nothing yet: edit an item."));
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
    let rows = [...st.items.values()];
    let scalarList = Object.entries(st.scalars).map(([k, v]) => ({ name: k, value: v, pending: false }));
    if (at === null) {
      if (!this.local) return; // the client's view is not loaded yet
      ({ rows, scalarList } = this.liveRows());
    }
    const byColl = new Map();
    for (const it of rows.sort((a, b) => (a.collection + "\u0000" + a.id < b.collection + "\u0000" + b.id ? -1 : 1))) {
      if (!byColl.has(it.collection)) byColl.set(it.collection, []);
      byColl.get(it.collection).push(it);
    }
    const parts = [
      banner,
      scalarList.length ? h("dl", { class: "scalars" }, scalarList.map((s) => [
        h("dt", { dataset: { scalar: s.name, pending: s.pending || null } }, s.name),
        h("dd", { class: s.pending ? "pending" : null }, compact(s.value), s.pending ? h("span", { class: "badge sent" }, "pending") : null)])) : null,
    ];
    if (!byColl.size) parts.push(h("p", { class: "muted" }, st.version || at !== null ? "No items at this version." : "This branch has no version yet: add an item below."));
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
          // A client of its own, used once: its first id is 1 on any branch.
          await api.push(this.org, this.project, {
            branch, clientGroup: this.canon.clientGroup,
            mutations: [{ client: "ui-branch-" + randomId(), id: 1, name: "branch.create", args: { from: this.branch, version: at }, ts: Date.now() }],
          });
        } catch (x) {
          if (!authFailed(x)) err.replaceChildren(errorBox(x, "Starting the branch"));
          return;
        }
        location.hash = projectHref(this.org, this.project, branch);
      },
    }, h("label", {}, `Start a branch from v${at}: `, name), h("button", { type: "submit", id: "branch-create" }, "Start"), err);
  }

  // liveRows merges the client's view (what the tab shows, with its
  // pending edits) with the canonical list (who wrote each item, its
  // size): an item a pending edit writes or deletes is marked so.
  liveRows() {
    const touched = new Set();
    const scalarsTouched = new Set();
    for (const p of this.pending) {
      if (p.name.startsWith("item.")) touched.add(itemKey(p.args?.collection, p.args?.id));
      if (p.name === "project.set") for (const k of Object.keys(p.args || {})) scalarsTouched.add(k);
    }
    const rows = [];
    const seen = new Set();
    for (const it of this.local.items) {
      const k = itemKey(it.collection, it.id);
      seen.add(k);
      const c = this.state.items.get(k);
      const text = canonical(it.data);
      rows.push({ collection: it.collection, id: it.id, meta: it.meta, text, size: c && !touched.has(k) ? c.size : new TextEncoder().encode(text).length,
        version: c?.version, pending: touched.has(k) });
    }
    for (const [k, c] of this.state.items) {
      if (!seen.has(k)) rows.push({ ...c, deleted: true, pending: true });
    }
    const scalarList = Object.entries(this.local.scalars).map(([k, v]) => ({ name: k, value: v, pending: scalarsTouched.has(k) }));
    return { rows, scalarList };
  }

  itemRow(it) {
    if (it.text !== undefined || it.deleted) {
      // The live view: the body is the client's, no read needed.
      const preview = h("td", { class: "preview" }, it.deleted ? "(deleted here, pending)" : it.text.length > 160 ? it.text.slice(0, 157) + "…" : it.text);
      return h("tr", { class: it.pending ? "pending" : null, dataset: { item: `${it.collection}/${it.id}`, version: it.version ?? "", pending: it.pending || null } },
        h("td", {}, h("a", { href: itemHref(this.org, this.project, this.branch, it.collection, it.id) }, it.id)),
        preview,
        h("td", { class: "meta" }, Object.keys(it.meta || {}).length ? compact(it.meta) : ""),
        h("td", { class: "num" }, it.size),
        h("td", { class: "num" }, it.pending ? h("span", { class: "badge sent" }, "pending") : null,
          it.version ? h("a", { href: projectHref(this.org, this.project, this.branch, { at: it.version }) }, ` v${it.version}`) : null));
    }
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
        this.mutate("project.set", { [n]: v });
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
        this.mutate("item.put", { collection: c, id: i, data: parsed });
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
    const edit = this.editor(collection, id, live);
    const changes = hist.changes;
    const to = changes.find((c) => c.version === this.diffTo) || changes[0];
    const diff = to ? await this.diffView(changes, to) : null;
    if (seq !== this.seq) return; // rendered again meanwhile
    const box = h("section", { class: "card", id: "item", dataset: { item: `${collection}/${id}` } },
      h("h2", {}, `${collection}/${id}`, live ? h("span", { class: "muted" }, ` · written by v${live.version}`) : h("span", { class: "muted" }, " · not in Canon now")),
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

  // renderLive follows the client's view: the items list, or the editor of
  // the item on screen (its history follows the versions).
  renderLive() {
    if (!this.state || this.closed) return;
    if (this.mode.kind === "items" && this.mode.at === null) this.renderItems();
    else if (this.mode.kind === "item" && this.ed?.key === itemKey(this.mode.collection, this.mode.id)) {
      this.editor(this.mode.collection, this.mode.id, this.state.items.get(this.ed.key));
    }
  }

  // editor returns the item's edit form, filled from the client's view
  // (with this tab's pending edits). The form lives as long as the user
  // stays on the item: a change of the item refreshes the fields only if
  // the user has not typed in them, and says so otherwise.
  editor(collection, id, live) {
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
          this.mutate("item.put", { collection, id, meta: m.v, data: d.v });
        },
      }, h("label", {}, "data (JSON)", ed.data), h("label", {}, "meta (JSON object) ", ed.meta), ed.err, ed.buttons);
    }
    const mine = this.local?.items.find((it) => it.collection === collection && it.id === id);
    const shown = mine ? canonical({ data: mine.data, meta: mine.meta }) : "";
    if (shown !== ed.shown) {
      if (!ed.dirty) {
        ed.data.value = mine ? pretty(canonical(mine.data)) : '{"text": ""}';
        ed.meta.value = JSON.stringify(mine?.meta || {});
        ed.err.replaceChildren();
      } else {
        ed.err.replaceChildren(h("div", { class: "notice" },
          mine ? `The item changed while you were editing${live ? ` (now v${live.version})` : ""}: saving replaces it.` : "The item was deleted while you were editing: saving creates it again."));
      }
      ed.shown = shown;
    }
    ed.buttons.replaceChildren(
      h("button", { type: "submit", id: "save" }, mine ? "Save" : "Create"),
      mine ? h("button", { type: "button", id: "delete", class: "danger", onclick: () => this.mutate("item.delete", { collection, id }) }, "Delete") : null);
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

function alertIn(el, e) {
  el.prepend(h("li", {}, errorBox(e)));
}

// ---- Start ----

window.addEventListener("hashchange", render);
render();
