// The todo/kanban example app on @canon/client: every edit runs the
// mutators of ../mutators.ts on the local view at once (optimistic),
// is pushed to Canon, which decides it with the same bundle, and the
// board follows Canon's versions. `make todo` serves it with canon dev:
// canon dev --app builds this file with esbuild, deploys ../mutators.ts
// for the project and writes app-config.js (window.CANON_APP) with the
// project and the bundle's hash, which the client checks against the
// deployed one.

import {Canon, type CanonError, type Item, type Outcome} from '@canon/client';
import todo, {columns, type Todo} from '../mutators.ts';

declare global {
  interface Window {
    CANON_APP: {org: string; project: string; bundleHash?: string};
    todoApp: TodoApp;
  }
}

interface TodoApp {
  canon: Canon<typeof todo> | undefined;
  /** Outcomes shown in the log, in order: "name id: applied" or "name id: error code". */
  outcomes: string[];
  /** Problems shown above the board (onError). */
  problems: string[];
}

const $ = <T extends Element>(sel: string, root: ParentNode = document): T => {
  const el = root.querySelector<T>(sel);
  if (el === null) {
    throw new Error(`index.html lacks ${sel}`);
  }
  return el;
};

const app: TodoApp = {canon: undefined, outcomes: [], problems: []};
window.todoApp = app;

function problem(msg: string): void {
  if (app.problems.includes(msg)) {
    return;
  }
  app.problems.push(msg);
  const box = $<HTMLDivElement>('#problems');
  const p = document.createElement('p');
  p.textContent = msg;
  box.append(p);
  box.hidden = false;
}

// log shows a mutation's canonical outcome once Canon has decided it.
function log(what: string, o: Promise<Outcome>): void {
  const li = document.createElement('li');
  li.textContent = `${what}: pending`;
  $('#log').prepend(li);
  o.then(
    r => {
      const line = r.status === 'applied' ? `${what}: applied in version ${r.version}` : `${what}: error ${r.code}: ${r.message}`;
      li.textContent = line;
      li.className = r.status;
      app.outcomes.push(r.status === 'applied' ? `${what}: applied` : `${what}: error ${r.code}`);
    },
    (e: CanonError) => {
      li.textContent = `${what}: refused: ${e.code}: ${e.message}`;
      li.className = 'error';
      app.outcomes.push(`${what}: refused ${e.code}`);
    },
  );
}

function newID(): string {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return Array.from(b, x => x.toString(16).padStart(2, '0')).join('');
}

// card is a todo's element, kept across renders (so that a title being
// edited keeps its focus and text).
function card(canon: Canon<typeof todo>, id: string): HTMLLIElement {
  const li = document.createElement('li');
  li.dataset['id'] = id;
  const done = document.createElement('input');
  done.type = 'checkbox';
  done.className = 'done';
  done.title = 'done';
  done.addEventListener('change', () => log(`todo.toggle ${id}`, canon.mutate['todo.toggle']({id})));
  const title = document.createElement('input');
  title.className = 'title';
  title.maxLength = 256;
  // The rename's "from" is the title shown when the editing began: a
  // rename that landed meanwhile makes this one a rename_conflict
  // (the rule of todo.rename), instead of being overwritten.
  title.addEventListener('focus', () => {
    title.dataset['from'] = title.dataset['title'];
  });
  title.addEventListener('keydown', e => {
    if (e.key === 'Enter') {
      title.blur();
    } else if (e.key === 'Escape') {
      title.value = title.dataset['title'] ?? '';
      title.blur();
    }
  });
  title.addEventListener('change', () => {
    const from = title.dataset['from'] ?? title.dataset['title'] ?? '';
    delete title.dataset['from'];
    if (title.value !== '' && title.value !== from) {
      log(`todo.rename ${id}`, canon.mutate['todo.rename']({id, title: title.value, from}));
    }
  });
  title.addEventListener('blur', () => {
    delete title.dataset['from'];
  });
  const buttons = [
    ['◀', 'move left', -1],
    ['▶', 'move right', 1],
  ] as const;
  const els: HTMLElement[] = [done, title];
  for (const [label, help, step] of buttons) {
    const b = document.createElement('button');
    b.textContent = label;
    b.title = help;
    b.className = step < 0 ? 'left' : 'right';
    b.addEventListener('click', () => {
      const col = li.dataset['column'] ?? 'todo';
      const to = columns[columns.indexOf(col) + step];
      if (to !== undefined) {
        // order sorts a column; the time puts it last.
        log(`todo.move ${id}`, canon.mutate['todo.move']({id, column: to, order: Date.now()}));
      }
    });
    els.push(b);
  }
  const del = document.createElement('button');
  del.textContent = '✕';
  del.title = 'delete';
  del.className = 'delete';
  del.addEventListener('click', () => log(`item.delete ${id}`, canon.mutate['item.delete']({collection: 'todos', id})));
  els.push(del);
  li.append(...els);
  return li;
}

function render(canon: Canon<typeof todo>, items: Array<Item & {id: string}>, cards: Map<string, HTMLLIElement>): void {
  const seen = new Set<string>();
  const byColumn = new Map<string, {li: HTMLLIElement; t: Todo}[]>(columns.map(c => [c, []]));
  for (const it of items) {
    const t = it.data as Todo;
    let li = cards.get(it.id);
    if (li === undefined) {
      li = card(canon, it.id);
      cards.set(it.id, li);
    }
    seen.add(it.id);
    li.dataset['column'] = t.column;
    li.classList.toggle('done', t.done);
    $<HTMLInputElement>('input.done', li).checked = t.done;
    const title = $<HTMLInputElement>('input.title', li);
    title.dataset['title'] = t.title;
    if (document.activeElement !== title) {
      title.value = t.title;
    }
    (byColumn.get(t.column) ?? byColumn.get('todo')!).push({li, t});
  }
  for (const [id, li] of cards) {
    if (!seen.has(id)) {
      li.remove();
      cards.delete(id);
    }
  }
  for (const [col, list] of byColumn) {
    list.sort((a, b) => a.t.order - b.t.order || a.t.created - b.t.created);
    const ul = $<HTMLUListElement>(`section[data-column="${col}"] ul`);
    // Append in order: moving an element that is in place is a no-op
    // for focus, so an edited title keeps it.
    list.forEach(({li}, i) => {
      if (ul.children[i] !== li) {
        ul.insertBefore(li, ul.children[i] ?? null);
      }
    });
  }
}

function start(): void {
  const cfg = window.CANON_APP;
  const token = new URLSearchParams(location.hash.slice(1)).get('token');
  $('#project').textContent = `${cfg.org}/${cfg.project}`;
  if (!token) {
    problem('No token: open the address canon dev prints (it ends with #token=…).');
    return;
  }
  const status = $<HTMLSpanElement>('#status');
  const pending = $<HTMLSpanElement>('#pending');
  const canon = new Canon({
    server: location.origin,
    token,
    org: cfg.org,
    project: cfg.project,
    mutators: todo,
    ...(cfg.bundleHash !== undefined && {bundleHash: cfg.bundleHash}),
    onStatus: s => {
      status.textContent = s;
      status.className = `status ${s}`;
    },
    onError: e => problem(`${e.code}: ${e.message}${e.details.hint ? ` (${e.details.hint})` : ''}`),
  });
  app.canon = canon;
  const cards = new Map<string, HTMLLIElement>();
  canon.subscribe({collection: 'todos'}, items => render(canon, items, cards));
  // The queue's length is no part of the view: shown by polling it.
  setInterval(() => {
    const n = canon.pendingCount;
    pending.textContent = n > 0 ? `${n} pending` : '';
  }, 250);
  $<HTMLFormElement>('#new').addEventListener('submit', e => {
    e.preventDefault();
    const input = $<HTMLInputElement>('#title');
    const title = input.value.trim();
    if (title === '') {
      return;
    }
    const id = newID();
    log(`todo.create ${id}`, canon.mutate['todo.create']({id, title, column: 'todo', order: Date.now()}));
    input.value = '';
  });
}

start();
