package loadgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Mix weighs the kinds of mutation a client sends. Every client edits
// only its own items, so that it knows their exact state and each of its
// mutations applies: a splice index is always inside the text.
type Mix struct {
	// Put creates or replaces a small item (item.put, ~100 bytes).
	Put int
	// Patch merges a change into a small item (item.patch).
	Patch int
	// Splice edits the text of a small item (item.splice).
	Splice int
	// LargeSplice edits a few characters inside the client's large item
	// (item.splice on a body of LargeMin-LargeMax bytes): small args, but
	// the server re-chunks the large body.
	LargeSplice int
	// LargePut writes the whole large item again with a small change
	// (item.put with 100-500 KiB of args): content-defined chunking keeps
	// what did not change.
	LargePut int
}

// DefaultMix is mostly small edits, with a tenth of large-item edits.
var DefaultMix = Mix{Put: 40, Patch: 25, Splice: 20, LargeSplice: 12, LargePut: 3}

func (m Mix) total() int { return m.Put + m.Patch + m.Splice + m.LargeSplice + m.LargePut }

func (m Mix) String() string {
	return fmt.Sprintf("put %d / patch %d / splice %d / large splice %d / large put %d",
		m.Put, m.Patch, m.Splice, m.LargeSplice, m.LargePut)
}

// op is one mutation as generated: its mutator and JSON args.
type op struct {
	name string
	args json.RawMessage
}

// maxBatchBytes bounds the args of one push, far under the producer's 4
// MiB body limit even with JSON escaping.
const maxBatchBytes = 1 << 20

// smallItems is how many small items each client edits.
const smallItems = 16

// generator makes one client's mutations. It is deterministic: two
// generators with the same seed and sizes make the same mutations, which
// is how the raw Kafka baseline replays exactly the records Canon got.
type generator struct {
	rng      *rand.Rand
	mix      Mix
	client   string
	batch    int
	min, max int

	small map[string]int // small item id → length of its text
	large []byte         // the large item's body text; nil until created
}

func newGenerator(seed uint64, client string, mix Mix, batch, largeMin, largeMax int) *generator {
	return &generator{
		rng:    rand.New(rand.NewPCG(seed, uint64(len(client))<<32|uint64(hash(client)))),
		mix:    mix,
		client: client,
		batch:  batch,
		min:    largeMin,
		max:    largeMax,
		small:  make(map[string]int),
	}
}

func hash(s string) uint32 {
	h := uint32(2166136261)
	for i := range len(s) {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// nextBatch returns the mutations of the client's next push: batch
// mutations, fewer when their args reach maxBatchBytes.
func (g *generator) nextBatch() []op {
	var ops []op
	size := 0
	for len(ops) < g.batch && size < maxBatchBytes {
		o := g.next()
		ops = append(ops, o)
		size += len(o.args)
	}
	return ops
}

func (g *generator) next() op {
	n := g.rng.IntN(g.mix.total())
	switch {
	case n < g.mix.Put:
		return g.put()
	case n < g.mix.Put+g.mix.Patch:
		return g.patch()
	case n < g.mix.Put+g.mix.Patch+g.mix.Splice:
		return g.splice()
	case n < g.mix.Put+g.mix.Patch+g.mix.Splice+g.mix.LargeSplice:
		return g.largeSplice()
	default:
		return g.largePut()
	}
}

func (g *generator) smallID() string {
	return fmt.Sprintf("%s-s%d", g.client, g.rng.IntN(smallItems))
}

func (g *generator) put() op {
	id := g.smallID()
	text := g.text(20 + g.rng.IntN(100))
	g.small[id] = len(text)
	return g.op("item.put", map[string]any{
		"collection": "notes", "id": id,
		"meta": map[string]any{"owner": g.client, "rev": g.rng.IntN(1000)},
		"data": map[string]any{"text": text, "done": false, "n": g.rng.IntN(1 << 20)},
	})
}

func (g *generator) patch() op {
	id := g.smallID()
	if _, ok := g.small[id]; !ok {
		return g.put()
	}
	return g.op("item.patch", map[string]any{
		"collection": "notes", "id": id,
		"data": map[string]any{"done": g.rng.IntN(2) == 0, "n": g.rng.IntN(1 << 20)},
	})
}

func (g *generator) splice() op {
	id := g.smallID()
	n, ok := g.small[id]
	if !ok {
		return g.put()
	}
	index := g.rng.IntN(n + 1)
	del := min(g.rng.IntN(4), n-index)
	insert := g.text(1 + g.rng.IntN(8))
	g.small[id] = n - del + len(insert)
	return g.op("item.splice", map[string]any{
		"collection": "notes", "id": id, "path": "/text", "index": index, "delete": del, "insert": insert,
	})
}

func (g *generator) largeID() string { return g.client + "-big" }

func (g *generator) largeSplice() op {
	if g.large == nil {
		return g.largePut()
	}
	index := g.rng.IntN(len(g.large) + 1)
	del := min(g.rng.IntN(16), len(g.large)-index)
	insert := g.text(1 + g.rng.IntN(32))
	g.large = append(g.large[:index:index], append([]byte(insert), g.large[index+del:]...)...)
	return g.op("item.splice", map[string]any{
		"collection": "docs", "id": g.largeID(), "path": "/body", "index": index, "delete": del, "insert": insert,
	})
}

func (g *generator) largePut() op {
	if g.large == nil {
		g.large = []byte(g.text(g.min + g.rng.IntN(g.max-g.min+1)))
	} else {
		// A small change somewhere: the chunks around it are new, the
		// rest are already stored.
		at := g.rng.IntN(len(g.large))
		copy(g.large[at:], g.text(min(64, len(g.large)-at)))
	}
	return g.op("item.put", map[string]any{
		"collection": "docs", "id": g.largeID(),
		"meta": map[string]any{"owner": g.client, "size": len(g.large)},
		"data": map[string]any{"body": string(g.large)},
	})
}

// words make text that looks like text (and compresses like it).
var words = strings.Fields(`the a of to and in is it you that he was for on are with as his they be at one have
this from or had by hot word but what some we can out other were all there when up use your how said an each she
which do their time if will way about many then them write would like so these her long make thing see him two
has look more day could go come did number sound no most people my over know water than call first who may down`)

func (g *generator) text(n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		b.WriteString(words[g.rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

func (g *generator) op(name string, args map[string]any) op {
	raw, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("loadgen: encode %s args: %v", name, err)) // maps of strings and numbers always encode
	}
	return op{name: name, args: raw}
}
