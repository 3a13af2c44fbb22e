// The todo/kanban mutators of the example, in TypeScript: the same logic
// runs on the server (Canon's sandbox) and optimistically in the client.
// Build the bundle with `canon mutators deploy examples/todo/mutators.ts`,
// or by hand with `esbuild --bundle --format=esm mutators.ts`;
// mutators.js beside it is that build (a Go test checks it is current).
//
// A todo is one item of the collection "todos":
//   {title, done, column, order, created}
// The scalar "todos" counts the todos ever created.

// The tx API of Canon's mutator contract (docs/mutators.md, "Mutators in
// JavaScript and TypeScript").
export type JSONValue = null | boolean | number | string | JSONValue[] | { [k: string]: JSONValue };
export interface Item {
  data: JSONValue;
  meta: { [k: string]: JSONValue };
}
export interface Tx {
  readonly mutation: {
    org: string;
    project: string;
    branch: string;
    clientGroup: string;
    client: string;
    id: number;
    name: string;
  };
  now(): number;
  get(collection: string, id: string): Item | undefined;
  has(collection: string, id: string): boolean;
  put(collection: string, id: string, data: JSONValue, meta?: { [k: string]: JSONValue }): void;
  delete(collection: string, id: string): boolean;
  scalar(name: string): JSONValue | undefined;
  setScalar(name: string, value: JSONValue | null): void;
}
export type Mutator = (tx: Tx, args: any) => void | Promise<void>;
export type Mutators = { [name: string]: Mutator };

export interface Todo {
  [k: string]: JSONValue;
  title: string;
  done: boolean;
  column: string;
  order: number;
  // created is when todo.create was decided: the mutation's log time.
  created: number;
}

const todos = "todos";
export const columns = ["todo", "doing", "done"];

// fail throws an Error with a code: the mutation's outcome is an error
// with that code and message, and nothing it wrote is kept.
function fail(code: string, message: string): never {
  const e = new Error(message) as Error & { code: string };
  e.code = code;
  throw e;
}

function text(args: any, field: string): string {
  const v = args?.[field];
  if (typeof v !== "string" || v.length === 0 || v.length > 256) {
    fail("invalid_args", `args.${field} must be a string of 1-256 characters`);
  }
  return v;
}

function num(args: any, field: string, dflt?: number): number {
  const v = args?.[field];
  if (v === undefined && dflt !== undefined) {
    return dflt;
  }
  if (typeof v !== "number" || !Number.isFinite(v)) {
    fail("invalid_args", `args.${field} must be a number`);
  }
  return v;
}

function column(args: any): string {
  const c = args?.column ?? "todo";
  if (!columns.includes(c)) {
    fail("invalid_args", `args.column must be one of ${columns.join(", ")}, not ${JSON.stringify(c)}`);
  }
  return c;
}

function load(tx: Tx, id: string): Todo {
  const it = tx.get(todos, id);
  if (it === undefined) {
    fail("not_found", `todo ${id} does not exist`);
  }
  return it.data as Todo;
}

function save(tx: Tx, id: string, t: Todo): void {
  tx.put(todos, id, t, { column: t.column, done: t.done });
}

export default {
  // todo.create {id, title, column?, order?} adds a todo; an id that
  // exists is an error (code todo_exists), so two clients that picked the
  // same id learn it.
  "todo.create": (tx: Tx, args: any) => {
    const id = text(args, "id");
    if (tx.has(todos, id)) {
      fail("todo_exists", `todo ${id} exists already`);
    }
    const now = tx.now();
    save(tx, id, { title: text(args, "title"), done: false, column: column(args), order: num(args, "order", now), created: now });
    tx.setScalar("todos", ((tx.scalar("todos") as number | undefined) ?? 0) + 1);
  },

  // todo.toggle {id} flips done. Two toggles at once cancel out, as both
  // clients saw.
  "todo.toggle": (tx: Tx, args: any) => {
    const id = text(args, "id");
    const t = load(tx, id);
    t.done = !t.done;
    save(tx, id, t);
  },

  // todo.move {id, column, order} puts a todo in a column at a place
  // (order sorts a column; pick a number between the neighbours').
  "todo.move": async (tx: Tx, args: any) => {
    const id = text(args, "id");
    const t = load(tx, id);
    t.column = column(args);
    t.order = num(args, "order");
    save(tx, id, t);
  },

  // todo.rename {id, title, from} retitles a todo. The conflict rule:
  // "from" is the title the client saw; when another rename landed first
  // the title is no longer "from", and this one loses: an error with code
  // rename_conflict that names the title that won, rather than silently
  // overwriting it.
  "todo.rename": (tx: Tx, args: any) => {
    const id = text(args, "id");
    const title = text(args, "title");
    const from = text(args, "from");
    const t = load(tx, id);
    if (t.title !== from) {
      fail("rename_conflict", `todo ${id} was renamed to ${JSON.stringify(t.title)} meanwhile; rename from that`);
    }
    t.title = title;
    save(tx, id, t);
  },
} satisfies Mutators;
