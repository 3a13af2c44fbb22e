package bundle_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/canon-sync/canon/model/bundle"
)

const mixedBundle = `
export default {
  "m.spin": (tx, args) => { let x = 0; for (let i = 0; i < args.n; i++) x += i; tx.setScalar("spin", x); },
  "m.hog": (tx, args) => { const a = []; for (let i = 0; i < args.n; i++) a.push(new Array(1000).fill(i)); tx.setScalar("hog", a.length); },
  "m.put": async (tx, args) => { await null; tx.put("c", args.id, {n: args.n, at: tx.now()}); },
  "m.throw": () => { throw new Error("no"); },
};`

// One bundle decides for many goroutines at once (the engine instances
// are pooled), and budgets that are hit midway (which discard an
// instance) decide the same in every run: every world ends with the same
// versions.
func TestConcurrentDeterministic(t *testing.T) {
	b := compile(t, mixedBundle, bundle.Options{CPUBudget: 200_000, MemoryBudget: 4 << 20})
	const worlds = 3
	var wg sync.WaitGroup
	results := make([]string, worlds)
	for g := range worlds {
		wg.Go(func() {
			w := newWorld(t, b)
			var out []byte
			for i := range 6 {
				var o any
				switch i % 6 {
				case 0:
					o = w.do("c", "m.spin", `{"n":10000}`) // well within the budget
				case 1:
					o = w.do("c", "m.spin", `{"n":1000000}`) // over it
				case 2:
					o = w.do("c", "m.hog", `{"n":100}`)
				case 3:
					o = w.do("c", "m.hog", `{"n":100000}`)
				case 4:
					o = w.do("c", "m.put", fmt.Sprintf(`{"id":"i%d","n":%d}`, i, i))
				case 5:
					o = w.do("c", "m.throw", `{}`)
				}
				j, _ := json.Marshal(o)
				out = append(out, j...)
				out = append(out, '\n')
			}
			h, err := w.state.Head("acme", "p", "main")
			if err != nil {
				t.Error(err)
				return
			}
			for n := uint64(1); n <= h.Version; n++ {
				v, _ := w.state.Version("acme", "p", "main", n)
				j, _ := json.Marshal(v)
				out = append(out, j...)
			}
			results[g] = string(out)
		})
	}
	wg.Wait()
	for g := 1; g < worlds; g++ {
		if results[g] != results[0] {
			t.Fatalf("world %d decided otherwise than world 0:\n%s\n---\n%s", g, results[g], results[0])
		}
	}
	for _, want := range []string{`"status":"applied"`, `"error":"mutator m.spin ran over the CPU budget of 200000 steps`, `"error":"mutator m.hog ran over the memory budget of 4 MiB`} {
		if !strings.Contains(results[0], want) {
			t.Errorf("no outcome %s in\n%s", want, results[0])
		}
	}
}
