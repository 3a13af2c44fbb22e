package store

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// wantChanges is the difference between two states of the model: what
// ChangesSince must find in the index.
func wantChanges(pm *projectModel, branch string, from uint64) Changes {
	head := pm.branch(branch).head()
	to := pm.at(branch, head)
	c := Changes{Org: pm.org, Project: pm.project, Branch: branch, From: from, To: head,
		StateHash: to.hash, Scalars: to.scalars, ScalarsFrom: map[string]json.RawMessage{}, Bodies: map[string][]byte{}}
	var old map[cid]model.ItemRef
	if from > 0 {
		st := pm.at(branch, from)
		c.ScalarsFrom, old = st.scalars, st.items
	}
	for _, r := range to.items {
		// Changed after from: written by a later version (the version an
		// item carries is the one that last wrote it).
		if r.Version > from {
			c.Puts = append(c.Puts, r)
			c.Bodies[r.Hash] = pm.bodies[r.Hash]
		}
	}
	for k := range old {
		if _, ok := to.items[k]; !ok {
			c.Deletes = append(c.Deletes, ItemKey{k.collection, k.id})
		}
	}
	slices.SortFunc(c.Puts, func(a, b model.ItemRef) int {
		return cmp.Or(cmp.Compare(a.Collection, b.Collection), cmp.Compare(a.ID, b.ID))
	})
	sortItemKeys(c.Deletes)
	return c
}

// checkChanges compares ChangesSince, by both of its ways (walking the
// versions and scanning the index), with the model, for every branch and
// every starting version.
func checkChanges(t *testing.T, s *Store, pm *projectModel) {
	t.Helper()
	p := s.PartitionOf(pm.org, pm.project)
	for name, b := range pm.branches {
		for from := uint64(0); from <= b.head(); from++ {
			want := wantChanges(pm, name, from)
			for _, way := range []struct {
				name  string
				limit uint64
			}{{"walk", 1 << 62}, {"scan", 0}} {
				snap := s.db.NewSnapshot()
				got, err := changesSince(snap, p, pm.org, pm.project, name, from, true, way.limit)
				_ = snap.Close()
				if err != nil {
					t.Fatalf("%s from %d (%s): %v", name, from, way.name, err)
				}
				if !reflect.DeepEqual(normChanges(got), normChanges(want)) {
					t.Fatalf("%s from %d (%s):\n got %+v\nwant %+v", name, from, way.name, got, want)
				}
			}
		}
	}
}

// normChanges makes empty and nil slices and maps compare equal.
func normChanges(c Changes) Changes {
	if len(c.Puts) == 0 {
		c.Puts = nil
	}
	if len(c.Deletes) == 0 {
		c.Deletes = nil
	}
	for i := range c.Puts {
		if len(c.Puts[i].Meta) == 0 {
			c.Puts[i].Meta = nil
		}
	}
	if len(c.Bodies) == 0 {
		c.Bodies = nil
	}
	return c
}

func TestChangesSince(t *testing.T) {
	s := newStore(t)
	pm := newProject(testOrg, projectIn(2, testPartitions, 0))
	applyAll(t, s, 2, history(pm))
	checkChanges(t, s, pm)

	// The exported form, and its errors.
	c, err := s.ChangesSince(pm.org, pm.project, "main", 2, ChangesOptions{Group: "g-c1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Bodies != nil || c.From != 2 || c.To != 5 || len(c.Puts) != 4 || len(c.Deletes) != 1 {
		t.Fatalf("main from 2: %+v", c)
	}
	// The history's outcomes carry no principal: the group is known by
	// its client alone.
	if !c.GroupKnown || c.GroupPrincipal != "" || !reflect.DeepEqual(c.GroupLastIDs, map[string]uint64{"c1": 4}) {
		t.Fatalf("group g-c1: known %v, principal %q, last ids %v", c.GroupKnown, c.GroupPrincipal, c.GroupLastIDs)
	}
	// c3 is a client of the feature branch only.
	c, err = s.ChangesSince(pm.org, pm.project, "main", 5, ChangesOptions{Group: "g-c3"})
	if err != nil || !c.GroupKnown || len(c.GroupLastIDs) != 0 || len(c.Puts)+len(c.Deletes) != 0 {
		t.Fatalf("group g-c3 on main: %+v, %v", c, err)
	}
	c, err = s.ChangesSince(pm.org, pm.project, "main", 5, ChangesOptions{Group: "nobody"})
	if err != nil || c.GroupKnown || len(c.GroupLastIDs) != 0 {
		t.Fatalf("unknown group: %+v, %v", c, err)
	}
	if _, err := s.ChangesSince(pm.org, pm.project, "main", 6, ChangesOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("from beyond the head: %v", err)
	}
	c, err = s.ChangesSince(pm.org, pm.project, "nope", 0, ChangesOptions{Bodies: true})
	if err != nil || c.To != 0 || len(c.Puts) != 0 {
		t.Fatalf("no such branch: %+v, %v", c, err)
	}
	if _, err := s.ChangesSince(pm.org, pm.project, "nope", 1, ChangesOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("from beyond the head of a missing branch: %v", err)
	}
}

// Random histories: puts, rewrites, deletions and re-creations over a
// few items, with forks, compared with the model from every version.
func TestChangesSinceRandom(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			s := newStore(t)
			pm := newProject(testOrg, projectIn(1, testPartitions, int(seed)))
			branches := []string{"main"}
			var off int64
			for i := range 40 {
				name := branches[rng.IntN(len(branches))]
				var b *versionBuilder
				if i > 5 && rng.IntN(10) == 0 {
					from := name
					name = fmt.Sprintf("b%d", i)
					b = pm.fork(name, from, 1+rng.Uint64N(pm.branch(from).head()))
					branches = append(branches, name)
				} else {
					b = pm.next(name)
				}
				for range 1 + rng.IntN(3) {
					k := cid{[]string{"a", "b"}[rng.IntN(2)], fmt.Sprint(rng.IntN(6))}
					if slices.ContainsFunc(b.v.Items, func(c schemas.ItemChange) bool { return c.Collection == k.collection && c.ID == k.id }) {
						continue // one change per item and version
					}
					if _, ok := b.st.items[k]; ok && rng.IntN(3) == 0 {
						b.del(k.collection, k.id)
						continue
					}
					b.put(k.collection, k.id, "", fmt.Sprintf(`{"v":%d}`, rng.IntN(4)))
				}
				if rng.IntN(4) == 0 {
					b.scalar("name", fmt.Sprintf(`"n%d"`, i))
				}
				off++
				mustApply(t, s, 1, b.commit(), off)
			}
			checkChanges(t, s, pm)
		})
	}
}
