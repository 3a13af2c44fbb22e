package store

import (
	"testing"

	"github.com/canon-sync/canon/schemas"
)

// The store answers why a mutation was rejected, by project, branch,
// client and id; records that name no mutation are skipped, and a reader
// of canon.rejected resumes from the offset it recorded.
func TestRejections(t *testing.T) {
	s := newStore(t)
	project := projectIn(1, testPartitions, 0)
	gap := &schemas.Rejected{Reason: schemas.ReasonGap, Message: "expected id 2", ExpectedID: 2,
		Mutation: &schemas.Mutation{Org: testOrg, Project: project, Client: "c", ID: 5}}
	other := &schemas.Rejected{Reason: "unauthorized", Message: "the client group belongs to user:ann",
		Mutation: &schemas.Mutation{Org: testOrg, Project: project, Branch: "dev", Client: "m", ID: 1}}
	undecodable := &schemas.Rejected{Reason: "undecodable"}
	if err := s.RecordRejections([]*schemas.Rejected{gap, other, undecodable}, 0, -1); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Rejection(testOrg, project, "main", "c", 5); err != nil || !ok ||
		got != (Rejection{Reason: schemas.ReasonGap, Message: "expected id 2", ExpectedID: 2}) {
		t.Fatalf("gap on main (the default branch): %+v, %v, %v", got, ok, err)
	}
	if got, ok, err := s.Rejection(testOrg, project, "dev", "m", 1); err != nil || !ok || got.Reason != "unauthorized" {
		t.Fatalf("unauthorized on dev: %+v, %v, %v", got, ok, err)
	}
	for _, q := range []struct {
		branch, client string
		id             uint64
	}{{"main", "c", 4}, {"dev", "c", 5}, {"main", "m", 1}} {
		if got, ok, err := s.Rejection(testOrg, project, q.branch, q.client, q.id); err != nil || ok {
			t.Errorf("%+v: %+v, %v, %v; want none", q, got, ok, err)
		}
	}
	if _, ok, err := s.RejectedOffset(3); err != nil || ok {
		t.Fatalf("offset before any: %v, %v", ok, err)
	}
	if err := s.RecordRejections(nil, 3, 42); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := s.RejectedOffset(3); err != nil || !ok || o != 42 {
		t.Fatalf("offset: %d, %v, %v; want 42", o, ok, err)
	}
	// The rejection lives in its project's partition: a drop forgets it.
	if err := s.DropPartition(1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Rejection(testOrg, project, "main", "c", 5); ok {
		t.Fatal("a rejection survived its partition's drop")
	}
}
