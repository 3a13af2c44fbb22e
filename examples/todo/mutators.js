// mutators.ts
var todos = "todos";
var columns = ["todo", "doing", "done"];
function fail(code, message) {
  const e = new Error(message);
  e.code = code;
  throw e;
}
function text(args, field) {
  const v = args?.[field];
  if (typeof v !== "string" || v.length === 0 || v.length > 256) {
    fail("invalid_args", `args.${field} must be a string of 1-256 characters`);
  }
  return v;
}
function num(args, field, dflt) {
  const v = args?.[field];
  if (v === void 0 && dflt !== void 0) {
    return dflt;
  }
  if (typeof v !== "number" || !Number.isFinite(v)) {
    fail("invalid_args", `args.${field} must be a number`);
  }
  return v;
}
function column(args) {
  const c = args?.column ?? "todo";
  if (!columns.includes(c)) {
    fail("invalid_args", `args.column must be one of ${columns.join(", ")}, not ${JSON.stringify(c)}`);
  }
  return c;
}
function load(tx, id) {
  const it = tx.get(todos, id);
  if (it === void 0) {
    fail("not_found", `todo ${id} does not exist`);
  }
  return it.data;
}
function save(tx, id, t) {
  tx.put(todos, id, t, { column: t.column, done: t.done });
}
var mutators_default = {
  // todo.create {id, title, column?, order?} adds a todo; an id that
  // exists is an error (code todo_exists), so two clients that picked the
  // same id learn it.
  "todo.create": (tx, args) => {
    const id = text(args, "id");
    if (tx.has(todos, id)) {
      fail("todo_exists", `todo ${id} exists already`);
    }
    const now = tx.now();
    save(tx, id, { title: text(args, "title"), done: false, column: column(args), order: num(args, "order", now), created: now });
    tx.setScalar("todos", (tx.scalar("todos") ?? 0) + 1);
  },
  // todo.toggle {id} flips done. Two toggles at once cancel out, as both
  // clients saw.
  "todo.toggle": (tx, args) => {
    const id = text(args, "id");
    const t = load(tx, id);
    t.done = !t.done;
    save(tx, id, t);
  },
  // todo.move {id, column, order} puts a todo in a column at a place
  // (order sorts a column; pick a number between the neighbours').
  "todo.move": async (tx, args) => {
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
  "todo.rename": (tx, args) => {
    const id = text(args, "id");
    const title = text(args, "title");
    const from = text(args, "from");
    const t = load(tx, id);
    if (t.title !== from) {
      fail("rename_conflict", `todo ${id} was renamed to ${JSON.stringify(t.title)} meanwhile; rename from that`);
    }
    t.title = title;
    save(tx, id, t);
  }
};
export {
  columns,
  mutators_default as default
};
