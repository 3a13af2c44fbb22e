package model_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// BenchmarkDecideSmallPatch decides item.patch mutations of a small item,
// in batches of 100 between Resets as a sequencer does: the first decision
// of a batch reads the item from the Reader, the others from the overlay.
func BenchmarkDecideSmallPatch(b *testing.B) {
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, model.NewRegistry(), schemas.Limits{})
	setup, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
		Org: testOrg, Project: testProject, Client: "setup", ID: 1, Name: model.ItemPut,
		Args: json.RawMessage(`{"collection":"tasks","id":"t1","meta":{"owner":"ann","tags":["a","b"]},"data":{"title":"Write the spec","done":false,"notes":"a few words of notes","estimate":3}}`),
	}, Timestamp: testEpoch})
	if err != nil || setup.Kind != model.Applied {
		b.Fatal(setup.Kind, err)
	}
	if err := state.Apply(setup.Version, setup.Chunks); err != nil {
		b.Fatal(err)
	}
	dec.Reset()

	const batch = 100
	var recs [batch]model.MutationRecord
	for i := range recs {
		recs[i] = model.MutationRecord{
			Mutation: &schemas.Mutation{
				Org: testOrg, Project: testProject, ClientGroup: "g", Client: "c", ID: uint64(i + 1), Name: model.ItemPatch,
				Args: json.RawMessage(`{"collection":"tasks","id":"t1","data":{"done":true,"estimate":` + string(rune('0'+i%10)) + `}}`),
			},
			Timestamp: testEpoch,
			Offset:    int64(i),
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d, err := dec.Decide(recs[i])
		if err != nil || d.Kind != model.Applied {
			b.Fatal(d.Kind, err)
		}
		if i++; i == batch {
			i = 0
			dec.Reset() // the store is not written: the batch starts over
		}
	}
}

// BenchmarkDecidePut100K decides puts of a new 100 KB body.
func BenchmarkDecidePut100K(b *testing.B) {
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, model.NewRegistry(), schemas.Limits{})
	text := string(model.SampleText(100<<10, 9))
	args := json.RawMessage(`{"collection":"docs","id":"d1","data":{"text":` + text + `}}`)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
			Org: testOrg, Project: testProject, Client: "c", ID: 1, Name: model.ItemPut, Args: args,
		}, Timestamp: testEpoch})
		if err != nil || d.Kind != model.Applied {
			b.Fatal(d.Kind, err)
		}
		dec.Reset()
	}
}

// BenchmarkDecideLargeSplice decides item.splice mutations of a few
// characters in a 300 KB body, one per batch (a Reset after each, once
// the store holds it), as the mix's large splices reach the sequencer.
// "nocache" is the Decider without its blob cache: it reads the body back
// from the Reader and hashes every chunk of the new body.
func BenchmarkDecideLargeSplice(b *testing.B) {
	for _, cached := range []bool{false, true} {
		name := "nocache"
		if cached {
			name = "cache"
		}
		b.Run(name, func(b *testing.B) {
			state := modeltest.NewMemState()
			dec := model.NewDecider(state, model.NewRegistry(), schemas.Limits{})
			if !cached {
				model.WithoutBlobCache(dec)
			}
			text := model.SampleText(300<<10, 11)
			decide := decideTimed(b, dec, state)
			decide(1, model.ItemPut, `{"collection":"docs","id":"d1","data":{"body":`+string(text)+`}}`)
			n := len(text) - 2 // ASCII: bytes are UTF-16 code units
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			id := uint64(1)
			for b.Loop() {
				id++
				decide(id, model.ItemSplice, fmt.Sprintf(`{"collection":"docs","id":"d1","path":"/body","index":%d,"delete":3,"insert":"edit"}`, int(id*7919)%(n-4)))
			}
		})
	}
}

// BenchmarkDecideEightLargeBodies decides item.splice mutations of eight
// 300 KB bodies in turn, one per batch, as the mix's eight clients edit
// their large items: with the blob cache's default bound, which holds
// some 25 versions, each body must stay in memory between its edits.
//
// split cuts every new body whole; resplit (the Decider's default) cuts
// again only around the edit.
func BenchmarkDecideEightLargeBodies(b *testing.B) {
	b.Run("split", func(b *testing.B) { benchmarkDecideEightLargeBodies(b, false) })
	b.Run("resplit", func(b *testing.B) { benchmarkDecideEightLargeBodies(b, true) })
}

func benchmarkDecideEightLargeBodies(b *testing.B, resplit bool) {
	state := modeltest.NewMemState()
	dec := model.NewDecider(state, model.NewRegistry(), schemas.Limits{})
	if !resplit {
		model.WithoutResplit(dec)
	}
	decide := decideTimed(b, dec, state)
	const items = 8
	n := 0
	for i := range items {
		text := model.SampleText(300<<10, uint64(20+i))
		n = len(text) - 2
		decide(uint64(i+1), model.ItemPut, fmt.Sprintf(`{"collection":"docs","id":"d%d","data":{"body":%s}}`, i, text))
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	id := uint64(items)
	for b.Loop() {
		id++
		decide(id, model.ItemSplice, fmt.Sprintf(`{"collection":"docs","id":"d%d","path":"/body","index":%d,"delete":3,"insert":"edit"}`, id%items, int(id*7919)%(n-4)))
	}
}

// decideTimed returns a function that decides one mutation of client c
// with dec, which must apply, and applies it to state outside the timer.
func decideTimed(b *testing.B, dec *model.Decider, state *modeltest.MemState) func(id uint64, name, args string) {
	return func(id uint64, name, args string) {
		d, err := dec.Decide(model.MutationRecord{Mutation: &schemas.Mutation{
			Org: testOrg, Project: testProject, Client: "c", ID: id, Name: name, Args: json.RawMessage(args),
		}, Timestamp: testEpoch})
		if err != nil || d.Kind != model.Applied {
			b.Fatal(d.Kind, d.Message, err)
		}
		b.StopTimer()
		if err := state.Apply(d.Version, d.Chunks); err != nil {
			b.Fatal(err)
		}
		dec.Reset()
		b.StartTimer()
	}
}
