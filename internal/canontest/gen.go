package canontest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/canon-sync/canon/schemas"
)

// Gen makes random but plausible mutations, reproducibly from its seed:
// new items and whole new bodies (some of several chunks, with args large
// enough to be stored as chunks), patches, splices of a text, deletes,
// scalar sets, and deliberately bad mutations whose outcome is an error.
// Each client edits only its own items, so Gen knows their state and
// predicts every outcome; a client's ids must follow each other from 1.
type Gen struct {
	rng     *rand.Rand
	clients map[string]*genClient
}

// genItem is what a client knows of one of its own items.
type genItem struct {
	id      string
	textLen int
}

type genClient struct {
	items    []genItem
	nextItem int
}

// NewGen returns a generator seeded with seed.
func NewGen(seed uint64) *Gen {
	return &Gen{rng: rand.New(rand.NewPCG(seed, 0x5eed)), clients: map[string]*genClient{}}
}

// Next fills in the name and args of m, the next mutation of m.Client on
// m.Org/m.Project@m.Branch, and returns its expected status: applied or
// error.
func (g *Gen) Next(m *schemas.Mutation) string {
	k := m.Org + "/" + m.Project + "@" + m.Branch + "/" + m.Client
	c := g.clients[k]
	if c == nil {
		c = &genClient{}
		g.clients[k] = c
	}
	set := func(name string, args any) {
		b, err := json.Marshal(args)
		if err != nil {
			panic(err)
		}
		m.Name, m.Args = name, b
	}
	id := m.ID
	r := g.rng.IntN(100)
	switch {
	case len(c.items) == 0 || r < 20:
		// A new item, or a whole new body for an existing one; one in
		// ten bodies is large enough for several chunks.
		text := g.Text(5 + g.rng.IntN(30))
		data := map[string]any{"title": "task " + strconv.FormatUint(id, 10), "text": text, "n": id}
		if g.rng.IntN(10) == 0 {
			data["pad"] = g.Text(8000 + g.rng.IntN(12000))
		}
		var it *genItem
		if len(c.items) < 6 || g.rng.IntN(2) == 0 {
			c.nextItem++
			c.items = append(c.items, genItem{id: fmt.Sprintf("%s-%d", m.Client, c.nextItem)})
			it = &c.items[len(c.items)-1]
		} else {
			it = &c.items[g.rng.IntN(len(c.items))]
		}
		it.textLen = len(text)
		set("item.put", map[string]any{"collection": "tasks", "id": it.id, "meta": map[string]any{"owner": m.Client}, "data": data})
	case r < 27:
		// Deliberately bad: the outcome is an error, and still a version.
		switch g.rng.IntN(3) {
		case 0:
			set("item.patch", map[string]any{"collection": "tasks", "id": m.Client + "-missing", "data": map[string]any{"x": 1}})
		case 1:
			set("no.such.mutator", map[string]any{"x": 1})
		default:
			set("item.put", map[string]any{"collection": "tasks", "id": m.Client + "-bad", "data": 1, "typo": true})
		}
		return schemas.StatusError
	case r < 50:
		it := c.items[g.rng.IntN(len(c.items))]
		set("item.patch", map[string]any{"collection": "tasks", "id": it.id, "data": map[string]any{"n": id, "done": id%2 == 0, "title": nil}})
	case r < 75:
		it := &c.items[g.rng.IntN(len(c.items))]
		index := g.rng.IntN(it.textLen + 1)
		del := min(g.rng.IntN(4), it.textLen-index)
		ins := g.Text(g.rng.IntN(6))
		it.textLen += len(ins) - del
		set("item.splice", map[string]any{"collection": "tasks", "id": it.id, "path": "/text", "index": index, "delete": del, "insert": ins})
	case r < 80 && len(c.items) > 1:
		i := g.rng.IntN(len(c.items))
		set("item.delete", map[string]any{"collection": "tasks", "id": c.items[i].id})
		c.items = slices.Delete(c.items, i, i+1)
	default:
		set("project.set", map[string]any{"s_" + m.Client: id})
	}
	return schemas.StatusApplied
}

// IntN is a random int in [0, n) from the generator's source.
func (g *Gen) IntN(n int) int { return g.rng.IntN(n) }

// Text is n random letters, digits and spaces.
func (g *Gen) Text(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[g.rng.IntN(len(letters))]
	}
	return string(b)
}
