package store

import (
	"errors"
	"testing"

	"github.com/canon-sync/canon/schemas"
)

func activation(org, project, src string, p int32, offset int64) *schemas.Deploy {
	return &schemas.Deploy{Org: org, Project: project, Hash: schemas.BundleHash([]byte(src)), Bundle: src, DeployedAt: 1,
		Source: &schemas.SourceRef{Partition: p, Offset: offset}, ActivatedAt: 2}
}

// Activations are applied per partition and scope: a project's deploy
// overrides its org's, the latest by source offset wins (an older one
// applied again changes nothing), a partition dropped forgets them, and
// a deploy of another partition's project is refused.
func TestDeploysActivePerScope(t *testing.T) {
	s := newStore(t)
	p := s.PartitionOf("acme", "doc")
	org1 := activation("acme", "", "export default {a: () => {}}", p, 3)
	doc := activation("acme", "doc", "export default {b: () => {}}", p, 5)
	if _, ok, err := s.ActiveBundle("acme", "doc"); err != nil || ok {
		t.Fatalf("before any deploy: %v %v", ok, err)
	}
	mustApply(t, s, p, []Record{{Deploy: org1}}, 4)
	if d, ok, _ := s.ActiveBundle("acme", "doc"); !ok || d.Hash != org1.Hash || d.Project != "" {
		t.Fatalf("after the org deploy: %+v %v", d, ok)
	}
	mustApply(t, s, p, []Record{{Deploy: doc}}, 6)
	if d, ok, _ := s.ActiveBundle("acme", "doc"); !ok || d.Hash != doc.Hash || d.Source.Offset != 5 {
		t.Fatalf("after the project deploy: %+v %v", d, ok)
	}
	// The org deploy again, older than the project's: the project keeps its own.
	org2 := activation("acme", "", "export default {c: () => {}}", p, 7)
	mustApply(t, s, p, []Record{{Deploy: org2}, {Deploy: org1}}, 8)
	if d, _, _ := s.Deployment(p, "acme", ""); d.Hash != org2.Hash {
		t.Errorf("org scope: %s, want the later %s", d.Hash, org2.Hash)
	}
	if d, _, _ := s.ActiveBundle("acme", "doc"); d.Hash != doc.Hash {
		t.Errorf("project scope after a later org deploy: %s, want its own %s", d.Hash, doc.Hash)
	}
	if src, ok, err := s.Bundle(p, "acme", doc.Hash); err != nil || !ok || string(src) != doc.Bundle {
		t.Errorf("bundle source: %q %v %v", src, ok, err)
	}
	// Without what Apply remembered, the activations are read from disk.
	s.parts[p].forgetDeploys()
	if d, ok, _ := s.ActiveBundle("acme", "doc"); !ok || d.Hash != doc.Hash {
		t.Errorf("read from disk: %+v %v", d, ok)
	}
	if err := s.DropPartition(p); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.ActiveBundle("acme", "doc"); ok {
		t.Errorf("a dropped partition still has an active bundle")
	}
	other := (p + 1) % s.Partitions()
	err := s.Apply(other, []Record{{Deploy: activation("acme", "doc", "x", other, 1)}}, 2)
	if !errors.Is(err, ErrWrongPartition) {
		t.Errorf("a deploy on another partition than its project's: %v, want ErrWrongPartition", err)
	}
	noSource := activation("acme", "doc", "x", p, 1)
	noSource.Source = nil
	if err := s.Apply(p, []Record{{Deploy: noSource}}, 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("a deploy without source: %v, want ErrInvalid", err)
	}
}

// A version record of format 3, written before the bundle hash, still
// decodes, without it; format 4 keeps it.
func TestVersionRecordFormat3(t *testing.T) {
	v := schemas.Version{Org: "o", Project: "p", Branch: "main", Version: 3, Parent: 2, TS: 9, Bundle: sha([]byte("b")),
		Mutations: []schemas.Outcome{{Client: "c", ID: 4, Name: "todo.x", Status: schemas.StatusApplied, Code: ""}},
		LastIDs:   map[string]uint64{"c": 4}, StateHash: sha(nil), Source: schemas.SourceRef{Offset: 8}}
	st, _ := decodeHex32(v.StateHash)
	rec := appendVersionRecord(nil, &v, schemas.StateHasher{}, st)
	got, hdr, err := decodeVersionRecord(rec)
	if err != nil || hdr.format != versionRecordFormat || got.Bundle != v.Bundle {
		t.Fatalf("format 4: bundle %q, format %d, %v", got.Bundle, hdr.format, err)
	}
	bundle := appendStr(nil, v.Bundle)
	old := append([]byte{versionRecordFormatV3}, rec[1:len(rec)-len(bundle)]...)
	got, hdr, err = decodeVersionRecord(old)
	if err != nil || hdr.format != versionRecordFormatV3 || got.Bundle != "" || got.Mutations[0].Name != "todo.x" {
		t.Fatalf("format 3: %+v, format %d, %v", got, hdr.format, err)
	}
}
