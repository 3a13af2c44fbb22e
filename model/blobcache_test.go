package model_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// TestBlobCacheDecidesTheSame decides the same edits of large bodies
// (splices, patches, puts of an edited copy, args over the inline limit)
// with a Decider without its blob cache, with it, and with it bounded so
// low that it starts over every few edits, each over its own store: the
// versions and chunks must be the same, byte for byte.
func TestBlobCacheDecidesTheSame(t *testing.T) {
	type run struct {
		state *modeltest.MemState
		dec   *model.Decider
	}
	runs := make([]run, 3)
	for i := range runs {
		runs[i].state = modeltest.NewMemState()
		runs[i].dec = model.NewDecider(runs[i].state, model.NewRegistry(), schemas.Limits{})
	}
	model.WithoutBlobCache(runs[0].dec)
	model.SetBlobCacheLimit(runs[2].dec, 400<<10)

	rng := rand.New(rand.NewPCG(1, 2))
	texts := map[string][]byte{}
	for _, id := range []string{"d1", "d2"} {
		texts[id] = model.SampleText(100<<10+rng.IntN(50<<10), rng.Uint64())
	}
	var muts []string
	for id, text := range texts {
		muts = append(muts, fmt.Sprintf(`{"name":%q,"args":{"collection":"docs","id":%q,"data":{"body":%s,"n":0}}}`, model.ItemPut, id, text))
	}
	for i := range 30 {
		id := []string{"d1", "d2"}[rng.IntN(2)]
		text := texts[id]
		n := len(text) - 2
		switch rng.IntN(4) {
		case 0, 1:
			muts = append(muts, fmt.Sprintf(`{"name":%q,"args":{"collection":"docs","id":%q,"path":"/body","index":%d,"delete":%d,"insert":"e\"dit"}}`,
				model.ItemSplice, id, rng.IntN(n-10), rng.IntN(10)))
		case 2:
			muts = append(muts, fmt.Sprintf(`{"name":%q,"args":{"collection":"docs","id":%q,"data":{"n":%d}}}`, model.ItemPatch, id, i))
		default:
			// A put of the same text with a few bytes replaced.
			at := 1 + rng.IntN(n-8)
			copy(text[at:], "changed ")
			muts = append(muts, fmt.Sprintf(`{"name":%q,"args":{"collection":"docs","id":%q,"data":{"body":%s,"n":%d}}}`, model.ItemPut, id, text, i))
		}
	}
	for i, m := range muts {
		var mut struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		}
		if err := json.Unmarshal([]byte(m), &mut); err != nil {
			t.Fatal(err)
		}
		var want []byte
		for k, r := range runs {
			d, err := r.dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
				Org: testOrg, Project: testProject, Client: "c", ID: uint64(i + 1), Name: mut.Name, Args: mut.Args,
			}, Timestamp: testEpoch, Offset: int64(i)})
			if err != nil || d.Kind != model.Applied {
				t.Fatalf("mutation %d (%s), run %d: %v %s %v", i, mut.Name, k, d.Kind, d.Message, err)
			}
			got, err := json.Marshal(struct {
				V *schemas.Version
				C []schemas.Chunk
			}{d.Version, d.Chunks})
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				want = got
			} else if string(got) != string(want) {
				t.Fatalf("mutation %d (%s): run %d decided differently from the Decider without a cache", i, mut.Name, k)
			}
			if err := r.state.Apply(d.Version, d.Chunks); err != nil {
				t.Fatalf("mutation %d, run %d: apply: %v", i, k, err)
			}
			r.dec.Reset()
		}
	}
}

// bodyReads counts the bodies a Decider reads from its store.
type bodyReads struct {
	*modeltest.MemState
	n int
}

func (r *bodyReads) Body(org, project, hash string) ([]byte, error) {
	r.n++
	return r.MemState.Body(org, project, hash)
}

// Two large bodies edited in turn, with a cache bound that holds a few
// versions of them: the bodies being edited stay in memory across the
// cache's generations and are never read back from the store.
func TestBlobCacheKeepsTheBodiesBeingEdited(t *testing.T) {
	state := &bodyReads{MemState: modeltest.NewMemState()}
	dec := model.NewDecider(state, model.NewRegistry(), schemas.Limits{})
	model.SetBlobCacheLimit(dec, 1<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	var muts []string
	for _, id := range []string{"d1", "d2"} {
		text := model.SampleText(150<<10, rng.Uint64())
		muts = append(muts, fmt.Sprintf(`{"name":%q,"args":{"collection":"docs","id":%q,"data":{"body":%s}}}`, model.ItemPut, id, text))
	}
	for i := range 40 {
		muts = append(muts, fmt.Sprintf(`{"name":%q,"args":{"collection":"docs","id":"d%d","path":"/body","index":%d,"delete":3,"insert":"edit"}}`,
			model.ItemSplice, 1+i%2, rng.IntN(140<<10)))
	}
	for i, m := range muts {
		var mut struct {
			Name string          `json:"name"`
			Args json.RawMessage `json:"args"`
		}
		if err := json.Unmarshal([]byte(m), &mut); err != nil {
			t.Fatal(err)
		}
		d, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
			Org: testOrg, Project: testProject, Client: "c", ID: uint64(i + 1), Name: mut.Name, Args: mut.Args,
		}, Timestamp: testEpoch, Offset: int64(i)})
		if err != nil || d.Kind != model.Applied {
			t.Fatalf("mutation %d: %v %s %v", i, d.Kind, d.Message, err)
		}
		if err := state.Apply(d.Version, d.Chunks); err != nil {
			t.Fatal(err)
		}
		dec.Reset()
	}
	if state.n != 0 {
		t.Fatalf("%d bodies read back from the store for %d edits", state.n, len(muts)-2)
	}
}
