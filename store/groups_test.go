package store

import (
	"maps"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/canon-sync/canon/schemas"
)

// The store indexes client groups from the outcomes it applies: the first
// principal owns a group, later outcomes (and records without a principal)
// do not change the owner, and the group's clients are listed with their
// last ids on a branch.
func TestGroupIndex(t *testing.T) {
	s := newStore(t)
	project := projectIn(1, testPartitions, 0)
	pm := newProject(testOrg, project)
	withGroup := func(b *versionBuilder, group, principal string) *versionBuilder {
		o := &b.v.Mutations[len(b.v.Mutations)-1]
		o.ClientGroup, o.Principal = group, principal
		return b
	}
	var recs []Record
	// One Apply with two versions: the second sees the first's binding in
	// the same batch; a later Apply reads it from the database.
	recs = append(recs, withGroup(pm.next("main").put("t", "1", `{}`, `1`).mutation("a1", 1, schemas.StatusApplied, ""), "g", "alice").commit()...)
	recs = append(recs, withGroup(pm.next("main").put("t", "2", `{}`, `2`).mutation("a2", 1, schemas.StatusError, "no"), "g", "bob").commit()...)
	mustApply(t, s, 1, recs, int64(len(recs)))
	recs2 := withGroup(pm.next("main").put("t", "3", `{}`, `3`).mutation("a1", 2, schemas.StatusApplied, ""), "g", "carol").commit()
	recs2 = append(recs2, withGroup(pm.next("main").put("t", "4", `{}`, `4`).mutation("x1", 1, schemas.StatusApplied, ""), "h", "").commit()...)
	mustApply(t, s, 1, recs2, int64(len(recs)+len(recs2)))

	if p, ok, err := s.GroupPrincipal(testOrg, project, "g"); err != nil || !ok || p != "alice" {
		t.Errorf("owner of g = %q, %v, %v; want alice", p, ok, err)
	}
	if p, ok, err := s.GroupPrincipal(testOrg, project, "h"); err != nil || ok {
		t.Errorf("owner of h (only a record without principal) = %q, %v, %v; want none", p, ok, err)
	}
	if p, ok, err := s.GroupPrincipal(testOrg, "elsewhere", "g"); err != nil || ok {
		t.Errorf("owner of g in another project = %q, %v, %v; want none", p, ok, err)
	}
	got, err := s.GroupClients(testOrg, project, "main", "g")
	if want := map[string]uint64{"a1": 2, "a2": 1}; err != nil || !maps.Equal(got, want) {
		t.Errorf("clients of g = %v, %v; want %v", got, err, want)
	}
	if got, err := s.GroupClients(testOrg, project, "other", "g"); err != nil || len(got) != 0 {
		t.Errorf("clients of g on a branch they never wrote = %v, %v; want none", got, err)
	}
	if got, err := s.GroupClients(testOrg, project, "main", "h"); err != nil || !maps.Equal(got, map[string]uint64{"x1": 1}) {
		t.Errorf("clients of h = %v, %v", got, err)
	}

	// Dropping the partition drops the index with the rest.
	if err := s.DropPartition(1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.GroupPrincipal(testOrg, project, "g"); ok {
		t.Error("the binding survived DropPartition")
	}
}

// A client belongs to the group of the first version that recorded it,
// also through a restart (the index is in Pebble) and after the partition
// is rebuilt from the same records (the changelog): a later version that
// names the client in another group (the sequencer does not make one, a
// trusted tool may) does not move it.
func TestClientIndex(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, "db")
	project := projectIn(1, testPartitions, 0)
	pm := newProject(testOrg, project)
	withGroup := func(b *versionBuilder, group, principal string) *versionBuilder {
		o := &b.v.Mutations[len(b.v.Mutations)-1]
		o.ClientGroup, o.Principal = group, principal
		return b
	}
	var recs []Record
	recs = append(recs, withGroup(pm.next("main").put("t", "1", `{}`, `1`).mutation("c1", 1, schemas.StatusApplied, ""), "g1", "alice").commit()...)
	recs = append(recs, withGroup(pm.next("main").put("t", "2", `{}`, `2`).mutation("c1", 2, schemas.StatusApplied, ""), "g2", "").commit()...)
	recs = append(recs, withGroup(pm.next("main").put("t", "3", `{}`, `3`).mutation("c2", 1, schemas.StatusError, "no"), "g2", "").commit()...)
	mustApply(t, s, 1, recs, int64(len(recs)))
	check := func(when string) {
		t.Helper()
		for client, want := range map[string]string{"c1": "g1", "c2": "g2"} {
			if g, ok, err := s.ClientGroup(testOrg, project, client); err != nil || !ok || g != want {
				t.Errorf("%s: group of %s = %q, %v, %v; want %s", when, client, g, ok, err, want)
			}
		}
		if g, ok, err := s.ClientGroup(testOrg, project, "c3"); err != nil || ok {
			t.Errorf("%s: group of an unknown client = %q, %v, %v; want none", when, g, ok, err)
		}
		if g, ok, err := s.ClientGroup(testOrg, "elsewhere", "c1"); err != nil || ok {
			t.Errorf("%s: group of c1 in another project = %q, %v, %v; want none", when, g, ok, err)
		}
	}
	check("applied")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, fs, "db")
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	check("reopened")
	if err := s.DropPartition(1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.ClientGroup(testOrg, project, "c1"); ok {
		t.Fatal("the client's group survived DropPartition")
	}
	mustApply(t, s, 1, recs, int64(len(recs)))
	check("rebuilt")
}
