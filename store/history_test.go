package store

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/canon-sync/canon/model"
)

// wantItemHistory derives an item's changes on a branch from the model's
// states, newest first: a put at v when the item at v was written by v, a
// deletion at v when it existed just before v (for version 1 of a fork,
// in the base it was made from) and no longer does.
func wantItemHistory(pm *projectModel, branch string, k cid) []ItemChange {
	bm := pm.branches[branch]
	var out []ItemChange
	for v := bm.head(); v >= 1; v-- {
		st := pm.at(branch, v)
		var prev map[cid]model.ItemRef
		if v > 1 {
			prev = pm.at(branch, v-1).items
		} else if base := bm.versions[0].Base; base != nil {
			prev = pm.at(base.Branch, base.Version).items
		}
		r, ok := st.items[k]
		_, existed := prev[k]
		switch {
		case ok && r.Version == v:
			out = append(out, ItemChange{Version: v, TS: st.ts, Ref: r})
		case !ok && existed:
			out = append(out, ItemChange{Version: v, TS: st.ts, Deleted: true, Ref: model.ItemRef{Collection: k.collection, ID: k.id}})
		}
	}
	return out
}

func TestItemHistory(t *testing.T) {
	s := newStore(t)
	name := projectIn(2, testPartitions, 0)
	p := s.PartitionOf(testOrg, name)
	pm := newProject(testOrg, name)
	applyAll(t, s, p, history(pm))

	items := []cid{{"notes", "a"}, {"notes", "b"}, {"notes", "c"}, {"notes", "m"}, {"notes", "z"}, {"tags", "x"}, {"tags", "y"}, {"tags", "h"}, {"tags", "never"}}
	for branch, bm := range pm.branches {
		for _, k := range items {
			want := wantItemHistory(pm, branch, k)
			got, err := s.ItemHistory(testOrg, name, branch, k.collection, k.id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Head != bm.head() || got.More || !reflect.DeepEqual(got.Changes, want) {
				t.Errorf("ItemHistory(%s, %v) = %+v\nwant %+v", branch, k, got, want)
			}
			// Page by one: the same changes, each page saying whether
			// more remain.
			var paged []ItemChange
			before := uint64(0)
			for {
				h, err := s.ItemHistory(testOrg, name, branch, k.collection, k.id, before, 1)
				if err != nil {
					t.Fatal(err)
				}
				paged = append(paged, h.Changes...)
				if !h.More {
					break
				}
				if len(h.Changes) != 1 {
					t.Fatalf("a page of 1 with more after it has %d changes", len(h.Changes))
				}
				before = h.Changes[0].Version
			}
			if !reflect.DeepEqual(paged, want) {
				t.Errorf("ItemHistory(%s, %v) by pages of 1 = %+v\nwant %+v", branch, k, paged, want)
			}
			// Before a version: only the older changes.
			for b := uint64(1); b <= bm.head()+1; b++ {
				h, err := s.ItemHistory(testOrg, name, branch, k.collection, k.id, b, 0)
				if err != nil {
					t.Fatal(err)
				}
				var older []ItemChange
				for _, c := range want {
					if c.Version < b {
						older = append(older, c)
					}
				}
				if !reflect.DeepEqual(h.Changes, older) {
					t.Errorf("ItemHistory(%s, %v, before %d) = %+v\nwant %+v", branch, k, b, h.Changes, older)
				}
			}
		}
	}
	// notes/a on main: written at 1 and 2 (with its meta), untouched later.
	h, err := s.ItemHistory(testOrg, name, "main", "notes", "a", 0, 0)
	if err != nil || len(h.Changes) != 2 || h.Changes[0].Version != 2 || string(h.Changes[0].Ref.Meta) != `{"t":"A2"}` || h.Changes[1].TS != 1000 {
		t.Errorf("notes/a on main: %+v %v", h, err)
	}
	if _, err := s.ItemHistory(testOrg, name, "nope", "notes", "a", 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("history on a missing branch: %v", err)
	}
}

func TestOrgProjects(t *testing.T) {
	s := newStore(t)
	const p = 3
	var names []string
	for i := range 5 {
		pm := newProject(testOrg, projectIn(p, testPartitions, i))
		mustApply(t, s, p, pm.next("main").put("c", "i", "", "1").commit(), int64(10*i+10))
		names = append(names, pm.project)
	}
	// Another org in the same partition, before and after acme in key
	// order: never listed.
	for i, org := range []string{"aaa", "zzz"} {
		for k := 0; ; k++ {
			pm := newProject(org, "q"+string(rune('0'+k)))
			if s.PartitionOf(org, pm.project) != p {
				continue
			}
			mustApply(t, s, p, pm.next("main").put("c", "i", "", "1").commit(), int64(100+i))
			break
		}
	}
	slices.Sort(names)
	var all []Project
	for _, n := range names {
		all = append(all, Project{Org: testOrg, Project: n})
	}
	for _, c := range []struct {
		after string
		limit int
		want  []Project
	}{
		{"", 0, all},
		{"", 2, all[:2]},
		{all[1].Project, 2, all[2:4]},
		{all[4].Project, 0, nil},
		{all[1].Project + "\x00", 0, all[2:]}, // after a name that is not a project
	} {
		got, err := s.OrgProjects(p, testOrg, c.after, c.limit)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("OrgProjects(after %q, limit %d) = %+v %v, want %+v", c.after, c.limit, got, err, c.want)
		}
	}
	if got, err := s.OrgProjects(p-1, testOrg, "", 0); err != nil || len(got) != 0 {
		t.Errorf("OrgProjects of an empty partition = %+v %v", got, err)
	}
	if _, err := s.OrgProjects(testPartitions, testOrg, "", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("OrgProjects of partition %d: %v", testPartitions, err)
	}
}
