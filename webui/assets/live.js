// A subscription to one branch over Canon's websocket (docs/websocket.md):
// every version after the one held, in order, then live ones; pushes on
// the same socket. On any close that resuming can fix it reconnects with
// from= the last version received.

import { auth, projectPath } from "./api.js";

// Close codes after which reconnecting unchanged cannot help.
const FATAL = new Map([
  [4000, "the subscription is invalid"],
  [4001, "the token is missing, invalid or expired"],
  [4003, "the token does not reach this project"],
  [4004, "this server does not serve the project's partition"],
]);

export class Subscription {
  // handlers: onVersion(msg), onReset(msg), onRejected(msg), onStatus(status, detail)
  constructor(org, project, branch, from, handlers) {
    this.org = org;
    this.project = project;
    this.branch = branch;
    this.last = from; // the last version received
    this.h = handlers;
    this.pending = new Map(); // requestId → {resolve, reject}
    this.nextRequest = 1;
    this.retry = 0;
    this.closed = false;
    this.canPush = false;
    this.connect();
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({ branch: this.branch, from: String(this.last), token: auth.token });
    const ws = new WebSocket(`${scheme}//${location.host}${projectPath(this.org, this.project)}/ws?${q}`);
    this.ws = ws;
    this.h.onStatus("connecting");
    ws.onmessage = (e) => this.message(JSON.parse(e.data));
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.canPush = false;
      for (const [, p] of this.pending) p.reject(new Error("the socket closed before the push was acknowledged"));
      this.pending.clear();
      if (this.closed) return;
      const fatal = FATAL.get(e.code);
      if (fatal) {
        this.h.onStatus("closed", `${fatal} (${e.code}${this.lastError ? ": " + this.lastError : ""})`);
        return;
      }
      // Back off: 0.5 s, 1 s, 2 s … up to 15 s.
      const delay = Math.min(15000, 500 * 2 ** this.retry++);
      this.h.onStatus("reconnecting", `closed (${e.code}); again in ${Math.round(delay / 100) / 10} s`);
      this.timer = setTimeout(() => this.connect(), delay);
    };
  }

  message(m) {
    if (this.closed) return; // what was in flight when the owner closed it
    switch (m.type) {
      case "hello":
        this.retry = 0;
        this.canPush = m.push;
        this.h.onStatus("live", `head ${m.head}`);
        break;
      case "version":
        if (m.version !== this.last + 1) {
          // The protocol never skips a version; if it ever did, the held
          // state would be wrong: start over rather than apply it.
          this.h.onReset({ reason: "gap_in_stream", head: m.version - 1 });
          break;
        }
        this.last = m.version;
        this.h.onVersion(m);
        break;
      case "reset":
        this.last = m.head;
        this.h.onReset(m);
        break;
      case "rejected":
        this.h.onRejected(m);
        break;
      case "pushed":
      case "error": {
        const p = this.pending.get(m.requestId);
        if (p) {
          this.pending.delete(m.requestId);
          if (m.type === "pushed") p.resolve(m);
          else p.reject(Object.assign(new Error(m.error.message), m.error));
        } else if (m.type === "error") {
          this.lastError = `${m.error.code}: ${m.error.message}`;
        }
        break;
      }
    }
  }

  // push sends mutations on the socket; it resolves once Kafka has them.
  push(clientGroup, mutations) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN || !this.canPush) {
      // Nothing was sent: a coded error, as an answer would be.
      return Promise.reject(Object.assign(new Error("the socket is not open for pushes"), { code: "not_connected" }));
    }
    const requestId = "r" + this.nextRequest++;
    return new Promise((resolve, reject) => {
      this.pending.set(requestId, { resolve, reject });
      this.ws.send(JSON.stringify({ type: "push", requestId, clientGroup, mutations }));
    });
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.ws) this.ws.close(1000);
  }
}
