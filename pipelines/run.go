package pipelines

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// step is one mutation a job sends to its target, in order.
type step struct {
	// m is the mutation as the target gets it: the target's org, project
	// and branch, the id on the target, no principal.
	m schemas.Mutation
	// ts is the record's timestamp: what tx.Now() gives the mutator. A
	// re-sent mutation keeps its original one.
	ts time.Time
	// orig is the source mutation the step re-sends; nil for the job's
	// own mutations (branch.create, a snapshot's writes).
	orig *origin
}

// lineage stamps a step's mutation with the job that sends it and, for a
// re-sent one, where it comes from.
func (h *history) lineage(s *step) schemas.Mutation {
	m := s.m
	m.Job = h.job
	if o := s.orig; o != nil && o.src.Branch != "" {
		m.Origin = &schemas.Origin{Branch: o.src.Branch, Version: o.version, Client: o.outcome.Client, ID: o.outcome.ID}
		if o.src.ProjectRef != (ProjectRef{m.Org, m.Project}) {
			m.Origin.Project = o.src.Org + "/" + o.src.Project
		}
	}
	return m
}

// origin is a mutation of the source and what the source made of it.
type origin struct {
	src     BranchRef
	version uint64 // the source version that recorded it
	outcome schemas.Outcome
	// last: the last mutation of its version, where the state hashes of
	// the source and the target are compared.
	last      bool
	stateHash string
	items     []schemas.ItemChange
	// bundle is the hash of the mutator bundle that decided the source
	// version ("" for the built-ins and Go mutators).
	bundle string
}

// result is what became of a step on the target.
type result struct {
	kind      model.Kind
	version   uint64 // applied or error: the target's version
	errMsg    string // error: the mutator's message; rejected: why
	stateHash string
	items     []schemas.ItemChange
	// existing: the target held the outcome before the job ran (a rerun).
	existing bool
}

func (r result) status() string {
	if r.kind == 0 {
		return "pending"
	}
	return r.kind.String()
}

type clientID struct {
	client string
	id     uint64
}

// decide decides the steps in memory against the history's store, as the
// sequencer would (same Decider, the registry of cfg), and applies the
// new versions to the store so that the target can be read afterwards.
// Nothing is produced.
func (h *history) decide(target ProjectRef, steps []step) ([]result, error) {
	p := h.projects[target]
	d := model.NewDecider(h.store, h.cfg.Registry, h.cfg.Limits)
	sb := &stepBundles{h: h, p: p}
	d.SetBundles(sb)
	results := make([]result, len(steps))
	var recs []store.Record
	next, _ := h.tail.Next(h.cfg.Topics.Versions, p)
	commit := func() error {
		if len(recs) == 0 {
			return nil
		}
		err := h.store.Apply(p, recs, next)
		d.Reset()
		recs = recs[:0]
		if err != nil {
			return fmt.Errorf("apply decided versions to the in-memory store: %w", err)
		}
		return nil
	}
	for i := range steps {
		s := &steps[i]
		m := s.m
		sb.cur = s
		dec, err := d.Decide(model.MutationRecord{Mutation: &m, Timestamp: s.ts, Partition: p, Offset: int64(i)})
		if err != nil {
			return nil, fmt.Errorf("decide mutation %d of client %s: %w", m.ID, m.Client, err)
		}
		r := result{kind: dec.Kind}
		switch dec.Kind {
		case model.Applied, model.Errored:
			v := dec.Version
			r.version, r.stateHash, r.items = v.Version, v.StateHash, v.Items
			r.errMsg = v.Mutations[0].Error
			for j := range dec.Chunks {
				recs = append(recs, store.Record{Chunk: &dec.Chunks[j]})
			}
			recs = append(recs, store.Record{Version: v})
			b := BranchRef{ProjectRef{v.Org, v.Project}, v.Branch}
			h.branches[b] = append(h.branches[b], v)
		case model.Gap:
			r.errMsg = fmt.Sprintf("gap: expected id %d", dec.ExpectedID)
		case model.Rejected:
			r.errMsg = dec.Reason + ": " + dec.Message
		}
		results[i] = r
		if len(recs) >= 500 {
			if err := commit(); err != nil {
				return nil, err
			}
		}
		if i%256 == 0 || i == len(steps)-1 {
			h.cfg.Progress(Progress{Phase: "decide", Done: int64(i + 1), Total: int64(len(steps))})
		}
	}
	if err := commit(); err != nil {
		return nil, err
	}
	return results, nil
}

// existing fills in the results of the steps the target already holds
// (the outcomes of an earlier run of the job) and returns how many.
func (h *history) existing(target BranchRef, steps []step, results []result) int {
	idx := make(map[clientID]int, len(steps))
	for i, s := range steps {
		idx[clientID{s.m.Client, s.m.ID}] = i
	}
	n := 0
	for _, v := range h.branches[target] {
		for k, o := range v.Mutations {
			i, ok := idx[clientID{o.Client, o.ID}]
			if !ok || results[i].kind != 0 {
				continue
			}
			results[i] = outcomeResult(v, k)
			results[i].existing = true
			n++
		}
	}
	return n
}

func outcomeResult(v *schemas.Version, k int) result {
	o := v.Mutations[k]
	r := result{kind: model.Applied, version: v.Version, items: v.Items}
	if o.Status == schemas.StatusError {
		r.kind, r.errMsg = model.Errored, o.Error
	}
	if k == len(v.Mutations)-1 {
		r.stateHash = v.StateHash
	}
	return r
}

// errIdle is returned when the sequencer decides nothing of what a job
// produced for Config.IdleTimeout.
var errIdle = errors.New("no outcome from the sequencer")

// produceAndWait produces the steps the target does not hold yet to
// canon.mutations, in order, to the partition the schemas' partitioner
// picks, and follows canon.versions and canon.rejected until every step
// has an outcome. The target's new versions are applied to the history's
// store.
//
// Steps are recognized on the target by (client, id), not by offset: a
// mutation of an interrupted earlier run that the sequencer decides
// after this run started is as good as this run's copy, which the
// sequencer then drops as a duplicate.
func (h *history) produceAndWait(ctx context.Context, target BranchRef, steps []step) ([]result, error) {
	results := make([]result, len(steps))
	h.existing(target, steps, results)
	idx := make(map[clientID]int, len(steps))
	for i, s := range steps {
		idx[clientID{s.m.Client, s.m.ID}] = i
	}
	p := h.projects[target.ProjectRef]
	var todo []int
	for i := range steps {
		if results[i].kind == 0 {
			todo = append(todo, i)
		}
	}
	byOffset := map[int64]int{}
	if len(todo) > 0 {
		offsets, err := h.produce(ctx, p, steps, todo)
		if err != nil {
			return nil, err
		}
		for j, i := range todo {
			byOffset[offsets[j]] = i
		}
	}
	pending := len(todo)
	total := int64(len(steps))
	report := func() {
		h.cfg.Progress(Progress{Phase: "wait", Done: total - int64(pending), Total: total})
	}
	report()
	deadline := time.Now().Add(h.cfg.IdleTimeout)
	for pending > 0 {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		evs, err := h.tail.Poll(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w for %s: %d of %d mutations undecided on %s; is a sequencer running on %s? Run the job again to resume",
					errIdle, h.cfg.IdleTimeout, pending, len(steps), target, h.cfg.Topics.Mutations)
			}
			return nil, fmt.Errorf("follow %s: %w", h.cfg.Topics.Versions, err)
		}
		versions, rejected, err := h.take(evs)
		if err != nil {
			return nil, err
		}
		before := pending
		for _, v := range versions {
			if v.Org != target.Org || v.Project != target.Project || v.Branch != target.Branch {
				continue
			}
			for k, o := range v.Mutations {
				if i, ok := idx[clientID{o.Client, o.ID}]; ok && results[i].kind == 0 {
					results[i] = outcomeResult(v, k)
					pending--
				}
			}
		}
		for _, ev := range rejected {
			rj := ev.Rejected
			if rj.Topic != h.cfg.Topics.Mutations || rj.Partition != p {
				continue
			}
			if i, ok := byOffset[rj.Offset]; ok && results[i].kind == 0 {
				results[i] = result{kind: model.Rejected, errMsg: rj.Reason + ": " + rj.Message}
				if rj.Reason == schemas.ReasonGap {
					results[i].kind = model.Gap
				}
				pending--
			}
		}
		if pending != before {
			deadline = time.Now().Add(h.cfg.IdleTimeout)
			report()
		}
	}
	return results, nil
}

// produce writes the steps todo (indexes into steps) to partition p of
// canon.mutations and returns their offsets.
func (h *history) produce(ctx context.Context, p int32, steps []step, todo []int) ([]int64, error) {
	cl, err := h.cfg.Kafka.NewClient(
		kgo.DefaultProduceTopic(h.cfg.Topics.Mutations),
		// Idempotent (franz-go's default) with acks=all: the records are
		// written once each, in order.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes),
		// The partition is the one schemas.Partition picks, set on each
		// record.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	defer cl.Close()
	offsets := make([]int64, len(todo))
	errs := make([]error, len(todo))
	total := int64(len(todo))
	// In chunks, each flushed before the next: the progress counts what
	// Kafka acknowledged, and an interrupted job leaves a prefix of its
	// mutations behind, which its rerun finds on the target.
	for lo := 0; lo < len(todo); lo += produceChunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := min(lo+produceChunk, len(todo))
		for j := lo; j < hi; j++ {
			m := h.lineage(&steps[todo[j]])
			val, err := schemas.EncodeMutation(&m, h.cfg.Limits)
			if err != nil {
				return nil, fmt.Errorf("encode mutation %d of client %s: %w", m.ID, m.Client, err)
			}
			rec := &kgo.Record{
				Key:       schemas.ProjectKey(m.Org, m.Project),
				Value:     val,
				Partition: p,
				Timestamp: steps[todo[j]].ts,
				Headers:   []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaMutationV1)}},
			}
			cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
				offsets[j], errs[j] = r.Offset, err
			})
		}
		if err := cl.Flush(ctx); err != nil {
			return nil, fmt.Errorf("produce to %s: %w", h.cfg.Topics.Mutations, err)
		}
		if err := errors.Join(errs[lo:hi]...); err != nil {
			return nil, fmt.Errorf("produce to %s (run the job again: what was written is skipped as duplicates): %w", h.cfg.Topics.Mutations, err)
		}
		h.cfg.Progress(Progress{Phase: "produce", Done: int64(hi), Total: total})
	}
	return offsets, nil
}

// produceChunk is how many mutations a job produces between flushes.
const produceChunk = 256
