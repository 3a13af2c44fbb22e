package model_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/model/modeltest"
	"github.com/canon-sync/canon/schemas"
)

// TestScenarios runs the golden scenarios of testdata/scenarios, one file
// per scenario. Every directive runs on three harnesses that commit the
// decisions to a MemState and Reset the Decider at different points: after
// every mutation, after every second one, and only before reading the
// state. Their outputs must be identical: a decision may not depend on
// where batches are cut.
//
// Directives:
//
//	limits [scalars=N] [meta=N] [data=N] [args=N]   (before any mutate)
//	mutate client=a id=1 name=item.put [branch=main] [ts=RFC3339] [project=p] [group=g] [principal=p] [chunks]
//	<args>
//	state [branch=main] [v=N]
//	version [branch=main] [v=N]
//
// group and principal default to group-<client> and user-<client>;
// principal= (empty) is a record of a trusted tool. mutate prints
// "applied v3", "error v3: <message>", "duplicate last=2",
// "gap last=1 expected=2" or "rejected <reason>: <message>" (and with
// chunks, the number of new chunks).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		hs := []*harness{newHarness(1), newHarness(2), newHarness(0)}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			want := hs[0].run(t, d)
			for _, h := range hs[1:] {
				if got := h.run(t, d); got != want {
					t.Errorf("%s: %s gives\n%s\nbut committing after every mutation gives\n%s", d.Pos, h, got, want)
				}
			}
			return want
		})
		for _, h := range hs {
			h.commit(t)
		}
	})
}

const (
	testOrg     = "acme"
	testProject = "doc"
)

var testEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// testRegistry is the built-ins plus mutators that misbehave on purpose.
func testRegistry(t testing.TB) *model.Registry {
	reg := model.NewRegistry()
	for name, fn := range map[string]model.Mutator{
		// test.now records what the mutator sees as the time.
		"test.now": func(tx model.Tx, _ json.RawMessage) error {
			now := tx.Now()
			if err := tx.SetScalar("now", json.RawMessage(fmt.Sprintf("%q", now.Format(time.RFC3339Nano)))); err != nil {
				return err
			}
			m := tx.Mutation()
			return tx.Put("log", fmt.Sprintf("%s-%d", m.Client, m.ID), model.Item{
				Data: json.RawMessage(fmt.Sprintf(`{"ms":%d,"zone":%q}`, now.UnixMilli(), now.Location())),
			})
		},
		// test.panic panics with its args.
		"test.panic": func(tx model.Tx, args json.RawMessage) error {
			if err := tx.SetScalar("panicked", json.RawMessage("true")); err != nil {
				return err
			}
			panic(string(args))
		},
		// test.nilmap panics with a runtime error.
		"test.nilmap": func(model.Tx, json.RawMessage) error {
			var m map[string]int
			m["x"]++ //nolint:staticcheck // SA5000: this panic is the test

			return nil
		},
		// test.fail writes, then fails: nothing it wrote may be kept.
		"test.fail": func(tx model.Tx, args json.RawMessage) error {
			if err := tx.Put("tasks", "written-by-fail", model.Item{Data: json.RawMessage(`1`)}); err != nil {
				return err
			}
			if err := tx.SetScalar("failed", json.RawMessage("true")); err != nil {
				return err
			}
			return errors.New("test.fail: " + string(args))
		},
		// test.copy copies an item's data into another item, through the
		// public Tx (args: {"from": id, "to": id} in collection tasks).
		"test.copy": func(tx model.Tx, args json.RawMessage) error {
			var a struct{ From, To string }
			if err := json.Unmarshal(args, &a); err != nil {
				return err
			}
			it, err := tx.Get("tasks", a.From)
			if err != nil {
				return err
			}
			return tx.Put("tasks", a.To, it)
		},
	} {
		if err := reg.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

type harness struct {
	state   *modeltest.MemState
	dec     *model.Decider
	limits  schemas.Limits
	every   int // commit after every this many mutations; 0: only before a read
	since   int
	pending []model.Decision
	offset  int64
}

func newHarness(every int) *harness {
	h := &harness{state: modeltest.NewMemState(), every: every}
	return h
}

func (h *harness) String() string {
	if h.every == 0 {
		return "committing only before reads"
	}
	return fmt.Sprintf("committing after every %d mutations", h.every)
}

func (h *harness) decider(t *testing.T) *model.Decider {
	if h.dec == nil {
		h.dec = model.NewDecider(h.state, testRegistry(t), h.limits)
	}
	return h.dec
}

// commit applies the pending decisions to the MemState, as the sequencer
// writes a committed batch to the store, and resets the Decider.
func (h *harness) commit(t *testing.T) {
	t.Helper()
	for _, d := range h.pending {
		if d.Version == nil {
			continue
		}
		if err := h.state.Apply(d.Version, d.Chunks); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
	}
	h.pending, h.since = nil, 0
	if h.dec != nil {
		h.dec.Reset()
	}
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "limits":
		if h.dec != nil {
			d.Fatalf(t, "limits must come before any mutation")
		}
		for _, a := range []struct {
			key string
			v   *int
		}{
			{"scalars", &h.limits.MaxScalarsBytes},
			{"meta", &h.limits.MaxMetaBytes},
			{"data", &h.limits.MaxDataBytes},
			{"args", &h.limits.MaxArgsBytes},
		} {
			d.MaybeScanArgs(t, a.key, a.v)
		}
		return "ok"
	case "mutate":
		return h.mutate(t, d)
	case "state":
		h.commit(t)
		return h.printState(t, d)
	case "version":
		h.commit(t)
		branch, v := h.branchVersion(t, d)
		rec, ok := h.state.Version(testOrg, testProject, branch, v)
		if !ok {
			return fmt.Sprintf("no version %d of %s", v, branch)
		}
		out, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func (h *harness) mutate(t *testing.T, d *datadriven.TestData) string {
	var client, name, branch, ts string
	var id uint64
	project := testProject
	d.ScanArgs(t, "client", &client)
	d.ScanArgs(t, "id", &id)
	d.ScanArgs(t, "name", &name)
	d.MaybeScanArgs(t, "branch", &branch)
	d.MaybeScanArgs(t, "project", &project)
	group, principal := "group-"+client, "user-"+client
	d.MaybeScanArgs(t, "group", &group)
	d.MaybeScanArgs(t, "principal", &principal)
	stamp := testEpoch.Add(time.Duration(h.offset) * time.Second)
	if d.MaybeScanArgs(t, "ts", &ts) {
		var err error
		if stamp, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			d.Fatalf(t, "ts: %v", err)
		}
		// A Kafka timestamp as a consumer decodes it: local time.
		stamp = stamp.Local()
	}
	var args json.RawMessage
	if in := strings.TrimSpace(d.Input); in != "" {
		args = json.RawMessage(in)
	}
	rec := model.MutationRecord{
		Mutation: &schemas.Mutation{
			Org: testOrg, Project: project, Branch: branch,
			ClientGroup: group, Client: client, ID: id,
			Name: name, Args: args,
			TS: stamp.UnixMilli() - 250, Principal: principal, ReceivedAt: stamp.UnixMilli() - 100,
		},
		Timestamp: stamp,
		Partition: 3,
		Offset:    h.offset,
	}
	h.offset++
	dec, err := h.decider(t).Decide(rec)
	if err != nil {
		d.Fatalf(t, "decide: %v", err)
	}
	h.pending = append(h.pending, dec)
	if h.since++; h.every > 0 && h.since >= h.every {
		h.commit(t)
	}
	var out string
	switch dec.Kind {
	case model.Applied:
		out = fmt.Sprintf("applied v%d", dec.Version.Version)
	case model.Errored:
		out = fmt.Sprintf("error v%d: %s", dec.Version.Version, dec.Version.Mutations[0].Error)
	case model.Duplicate:
		out = fmt.Sprintf("duplicate last=%d", dec.LastID)
	case model.Gap:
		out = fmt.Sprintf("gap last=%d expected=%d", dec.LastID, dec.ExpectedID)
	case model.Rejected:
		out = fmt.Sprintf("rejected %s: %s", dec.Reason, dec.Message)
	default:
		d.Fatalf(t, "unknown decision kind %v", dec.Kind)
	}
	if d.HasArg("chunks") {
		n := 0
		for _, c := range dec.Chunks {
			n += len(c.Data)
		}
		out += fmt.Sprintf(" (new chunks: %d, %d bytes)", len(dec.Chunks), n)
	}
	return out
}

func (h *harness) branchVersion(t *testing.T, d *datadriven.TestData) (string, uint64) {
	branch := schemas.DefaultBranch
	d.MaybeScanArgs(t, "branch", &branch)
	var v uint64
	if !d.MaybeScanArgs(t, "v", &v) {
		head, err := h.state.Head(testOrg, testProject, branch)
		if err != nil {
			t.Fatal(err)
		}
		v = head.Version
	}
	return branch, v
}

// printState prints a branch's state at a version: its scalars and its
// items (collection/id meta data), from the MemState.
func (h *harness) printState(t *testing.T, d *datadriven.TestData) string {
	branch, v := h.branchVersion(t, d)
	head, ok, err := h.state.HeadAt(testOrg, testProject, branch, v)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return fmt.Sprintf("no version %d of %s", v, branch)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s v%d\n", branch, head.Version)
	sc, err := json.Marshal(head.Scalars)
	if err != nil {
		t.Fatal(err)
	}
	sc, err = model.Canonical(sc)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "scalars %s\n", sc)
	refs, _ := h.state.Items(testOrg, testProject, branch, v)
	for _, ref := range refs {
		body, err := h.state.Body(testOrg, testProject, ref.Hash)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s/%s %s %s\n", ref.Collection, ref.ID, ref.Meta, body)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
