package modeltest

// TasksBundle is the built-ins' logic as JavaScript mutators (a shallow
// merge for the patch, which is what the benchmarks' patches need):
// "task.put", "task.patch" and "task.splice" decide what "item.put",
// "item.patch" and "item.splice" do. The JavaScript side of the decide
// benchmark (model/bundle) and of the sequencer's throughput benchmark,
// which compare the engine with the built-ins on the same mutations.
const TasksBundle = `export default {
  "task.put": (tx, a) => { tx.put(a.collection, a.id, a.data); },
  "task.patch": (tx, a) => {
    const it = tx.get(a.collection, a.id);
    if (!it) { const e = new Error("no item " + a.id); e.code = "not_found"; throw e; }
    Object.assign(it.data, a.data);
    tx.put(a.collection, a.id, it.data, it.meta);
  },
  "task.splice": (tx, a) => {
    const it = tx.get(a.collection, a.id);
    if (!it) { const e = new Error("no item " + a.id); e.code = "not_found"; throw e; }
    const s = it.data.text;
    it.data.text = s.slice(0, a.index) + a.insert + s.slice(a.index + a.delete);
    tx.put(a.collection, a.id, it.data, it.meta);
  },
};`
