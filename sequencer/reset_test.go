package sequencer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
)

// resetOffsets moves the sequencer group's committed input offset of
// partition 0, as an operator would with kafka-consumer-groups.sh, once
// the group has no member left.
func resetOffsets(t *testing.T, ctx context.Context, e *topicsEnv, offset int64) {
	t.Helper()
	adm := kadm.NewClient(e.cl)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: e.names.Mutations, Partition: 0, At: offset, LeaderEpoch: -1})
	canontest.Wait(t, ctx, fmt.Sprintf("the group empty and its offset moved to %d", offset), func() (bool, error) {
		resp, err := adm.CommitOffsets(ctx, e.prefix+sequencer.DefaultGroup, os)
		if err == nil {
			err = resp.Error()
		}
		return err == nil, nil
	})
}

// TestIntegrationOffsetResetKeepsHistory moves the sequencer group's
// input offset back, to the start and to the middle, after records were
// rejected that today's state would accept: a gap, a write to a branch
// that did not exist yet, and a branch.create from it. Nothing decided
// before is decided again, by the instance that decided it (its store
// kept) or by a new one (restored from the changelog), and the clients'
// next mutations are decided as they would have been without the reset.
func TestIntegrationOffsetResetKeepsHistory(t *testing.T) {
	k := testenv.NewKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newTopicsEnv(t, k.Brokers, 1)
	mut := func(branch, client string, id uint64, name, args string) *schemas.Mutation {
		return &schemas.Mutation{Org: "acme", Project: "doc", Branch: branch, ClientGroup: "g-" + client, Client: client,
			ID: id, Name: name, Args: json.RawMessage(args)}
	}
	put := func(branch, client string, id uint64, item string) *schemas.Mutation {
		return mut(branch, client, id, "item.put", `{"collection":"notes","id":"`+item+`","data":{"by":"`+client+`"}}`)
	}
	e.produceSync(t,
		e.mutationRecord(t, put("main", "g", 2, "n1")),                              // 0: gap, expects 1
		e.mutationRecord(t, put("dev", "w", 1, "n2")),                               // 1: branch dev does not exist
		e.mutationRecord(t, mut("feat", "f", 1, "branch.create", `{"from":"dev"}`)), // 2: nothing to create feat from
		e.mutationRecord(t, put("main", "g", 1, "n3")),                              // 3: main v1
		e.mutationRecord(t, mut("dev", "m", 1, "branch.create", `{"from":"main"}`)), // 4: dev v1
	)
	cl := followChangelog(t, e)
	expect := map[mutKey]string{{"doc", "g", 1}: schemas.StatusApplied, {"doc", "m", 1}: schemas.StatusApplied}
	rejected := 3
	phase := func(what string, p *seqProc, next *schemas.Mutation) {
		t.Helper()
		t.Log(what)
		p.Start(ctx)
		if next != nil {
			e.produceSync(t, e.mutationRecord(t, next))
			expect[mutKey{"doc", next.Client, next.ID}] = schemas.StatusApplied
		}
		canontest.Wait(t, ctx, "every expected outcome in the changelog", func() (bool, error) {
			return cl.outcomes() >= int64(len(expect)), nil
		})
		canontest.Wait(t, ctx, p.Name()+" ready", func() (bool, error) { return p.Ready(), nil })
		cl.catchUp(ctx)
		cl.check(expect)
		if n := len(canontest.ReadTopic(t, e.brokers, e.names.Rejected)); n != rejected {
			t.Fatalf("%d rejected records, want %d", n, rejected)
		}
		p.Stop()
		p.CheckLog()
	}

	a := newSeqProc(t, e, "a")
	phase("a decides the first records", a, nil)

	// Reset to the start: a's store has dev, and g's last id is 1.
	resetOffsets(t, ctx, e, 0)
	// w sends its id 1 again, now that dev exists: applied, not a
	// duplicate of the rejected one.
	phase("offsets reset to 0; a restarts on its store", a, put("dev", "w", 1, "n4"))

	// Reset to the middle, with a new instance that rebuilds its store
	// from the changelog: the branch.create of feat stays rejected, and
	// g's genuine id 2 follows its id 1.
	resetOffsets(t, ctx, e, 2)
	b := newSeqProc(t, e, "b")
	phase("offsets reset to 2; b starts with no store", b, put("main", "g", 2, "n5"))

	h := cl.check(expect)
	if _, ok := h.versions[branchRef{"doc", "feat"}]; ok {
		t.Error("branch feat was created by deciding its rejected branch.create again")
	}
	if n := len(h.versions[branchRef{"doc", "main"}]) + len(h.versions[branchRef{"doc", "dev"}]); n != 4 {
		t.Errorf("%d versions of main and dev, want 4", n)
	}
}
