package store

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/canon-sync/canon/schemas"
)

// A version record gives back the version that was applied, nil and
// empty kept apart, hashes in any spelling, with its scalars as JSON.
func TestVersionRecordRoundTrip(t *testing.T) {
	h := sha([]byte("x"))
	for _, v := range []schemas.Version{
		{Org: "o", Project: "p", Branch: "main", Version: 1, TS: 5, Scalars: map[string]json.RawMessage{}},
		{
			Org: "acme", Project: "doc", Branch: "f", Version: 1, Base: &schemas.BranchRef{Branch: "main", Version: 7}, TS: 1 << 40,
			Scalars: map[string]json.RawMessage{"name": json.RawMessage(`"Doc <&>"`), "n": json.RawMessage(`{"a":[1, 2]}`), "q\"\n": json.RawMessage(`null`)},
			Items: []schemas.ItemChange{
				{Collection: "notes", ID: "a\x00b", Op: schemas.OpPut, Meta: json.RawMessage(`{"t":"A"}`), Hash: h, Size: 1, Chunks: []string{h}},
				{Collection: "notes", ID: "b", Op: schemas.OpPut, Meta: json.RawMessage{}, Hash: h, Size: 1, Chunks: []string{}},
				{Collection: "notes", ID: "c", Op: schemas.OpDelete, Hash: strings.ToUpper(h)},
			},
			Mutations: []schemas.Outcome{
				{ClientGroup: "g", Client: "c1", ID: 9, Name: "item.put", Args: json.RawMessage(`{"x": 1}`), Status: schemas.StatusApplied, TS: -3, Principal: "ann", ReceivedAt: 77, Offset: 12},
				{Client: "c2", ID: 1, Name: "big", ArgsRef: &schemas.BlobRef{Hash: h, Size: 10 << 10, Chunks: []string{h, "not a hash"}}, Status: schemas.StatusError, Error: "no such note"},
				{Client: "c3", ID: 2, Args: json.RawMessage{}, ArgsRef: &schemas.BlobRef{Hash: h}},
			},
			LastIDs:   map[string]uint64{"c1": 9, "c2": 1, "c3": 2},
			StateHash: h,
			Source:    schemas.SourceRef{Partition: 3, Offset: 1 << 50},
		},
		{
			Org: "acme", Project: "doc", Branch: "rb", Version: 2, Parent: 1, TS: 1 << 41, DecidedAt: 1<<41 + 7,
			Scalars: map[string]json.RawMessage{},
			Mutations: []schemas.Outcome{
				{ClientGroup: "g", Client: "c1", ID: 1, Name: "item.patch", Args: json.RawMessage(`{}`), Status: schemas.StatusError,
					Error: "item notes/x: not found", Code: "not_found",
					Job:    &schemas.Job{Kind: "rebase", Principal: "os:ann", At: 1 << 40},
					Origin: &schemas.Origin{Project: "acme/other", Branch: "main", Version: 4, Client: "c9", ID: 3}},
				{Client: "c2", ID: 1, Name: "branch.create", Args: json.RawMessage(`{}`), Status: schemas.StatusApplied,
					Job: &schemas.Job{Kind: "replay", At: 1}},
				{Client: "c3", ID: 1, Name: "x", Args: json.RawMessage(`{}`), Status: schemas.StatusApplied,
					Origin: &schemas.Origin{Branch: "main", Version: 1, Client: "c3", ID: 1}},
			},
			LastIDs: map[string]uint64{"c1": 1, "c2": 1, "c3": 1},
		},
	} {
		var sum schemas.StateHasher
		sum.Add([32]byte{1})
		st, _ := decodeHex32(h)
		if v.StateHash == "" {
			v.StateHash = h
		}
		rec := appendVersionRecord(nil, &v, sum, st)
		got, hdr, err := decodeVersionRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		if hdr.sum != sum || hdr.stateHash != st || hdr.ts != v.TS {
			t.Errorf("header = %+v", hdr)
		}
		want := v
		var sc map[string]json.RawMessage
		if err := json.Unmarshal(appendScalarsJSON(nil, v.Scalars), &sc); err != nil {
			t.Fatalf("scalars JSON: %v", err)
		}
		want.Scalars = sc
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decode(encode(v)):\n got %+v\nwant %+v", got, want)
		}
		// Equal versions give equal bytes, whatever the maps' order.
		for range 20 {
			if again := appendVersionRecord(nil, &v, sum, st); string(again) != string(rec) {
				t.Fatal("the encoding of a version varies")
			}
		}
		for i := range rec {
			if _, _, err := decodeVersionRecord(rec[:i]); err == nil {
				t.Fatalf("a record truncated to %d of %d bytes decodes", i, len(rec))
			}
		}
	}
}

// A record of format 2, written before the store kept decidedAt and the
// mutations' code, job and origin, still decodes, without them.
func TestVersionRecordFormat2(t *testing.T) {
	v := schemas.Version{Org: "o", Project: "p", Branch: "main", Version: 3, Parent: 2, TS: 9, Scalars: map[string]json.RawMessage{},
		Mutations: []schemas.Outcome{{Client: "c", ID: 4, Name: "item.put", Args: json.RawMessage(`{}`), Status: schemas.StatusApplied}},
		LastIDs:   map[string]uint64{"c": 4}, StateHash: sha(nil), Source: schemas.SourceRef{Offset: 8}}
	st, _ := decodeHex32(v.StateHash)
	rec := appendVersionRecord(nil, &v, schemas.StateHasher{}, st)
	trailer := appendVersionTrailer(nil, &v)
	old := append([]byte{versionRecordFormatV2}, rec[1:len(rec)-len(trailer)]...)
	got, hdr, err := decodeVersionRecord(old)
	if err != nil {
		t.Fatal(err)
	}
	if hdr.format != versionRecordFormatV2 || !reflect.DeepEqual(got, v) {
		t.Fatalf("format 2 record: format %d, decoded\n%+v\nwant\n%+v", hdr.format, got, v)
	}
}

func FuzzDecodeVersionRecord(f *testing.F) {
	v := schemas.Version{Org: "o", Project: "p", Branch: "b", Version: 2, Parent: 1,
		Items:     []schemas.ItemChange{{Collection: "c", ID: "i", Op: schemas.OpPut, Hash: sha(nil), Chunks: []string{sha(nil)}}},
		Mutations: []schemas.Outcome{{Client: "c", ID: 1, Args: json.RawMessage(`{}`)}}, LastIDs: map[string]uint64{"c": 1}}
	f.Add(appendVersionRecord(nil, &v, schemas.StateHasher{}, [32]byte{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, h, err := decodeVersionRecord(b)
		if err != nil {
			return
		}
		// What decodes encodes back to the same bytes, but for the
		// scalars, which are re-encoded from JSON.
		again, _, err := decodeVersionRecord(appendVersionRecord(nil, &got, h.sum, h.stateHash))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("re-encoding %+v gives %+v, %v", got, again, err)
		}
	})
}

func TestEntryRoundTrip(t *testing.T) {
	h, _ := decodeHex32(sha([]byte("x")))
	g, _ := decodeHex32(sha([]byte("y")))
	for _, e := range []entry{
		{deleted: true},
		{version: 7, meta: []byte(`{"a":1}`), hash: h, size: 1, chunks: [][32]byte{h}},
		{version: 1 << 40, hash: h, size: 3, chunks: [][32]byte{g, h}},
		{version: 2, hash: h, chunks: [][32]byte{g}},
		{version: 3, hash: h, chunks: [][32]byte{}},
	} {
		got, err := decodeEntry(e.encode())
		if err != nil || !reflect.DeepEqual(got, e) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", e, got, err)
		}
	}
	if one, many := (&entry{hash: h, chunks: [][32]byte{h}}).encode(), (&entry{hash: h, chunks: [][32]byte{g}}).encode(); len(one) != len(many)-33 {
		t.Errorf("a body of one chunk takes %d bytes, of another chunk %d", len(one), len(many))
	}
}

// A mutation record round-trips with and without its code, and one
// written before codes were stored (version | status | error, nothing
// after) still reads, as a record without a code.
func TestMutationStatusRecord(t *testing.T) {
	for _, m := range []MutationStatus{
		{Version: 1, Status: schemas.StatusApplied},
		{Version: 7, Status: schemas.StatusError, Error: "no such note"},
		{Version: 1 << 40, Status: schemas.StatusError, Error: "title taken", Code: "rename_conflict"},
	} {
		got, err := decodeMutationStatus(m.appendTo(nil))
		if err != nil || got != m {
			t.Errorf("round trip of %+v: %+v %v", m, got, err)
		}
	}
	// The bytes an older Canon wrote for version 7, error "boom".
	old := []byte{7, 5, 'e', 'r', 'r', 'o', 'r', 4, 'b', 'o', 'o', 'm'}
	if got, err := decodeMutationStatus(old); err != nil || got != (MutationStatus{Version: 7, Status: "error", Error: "boom"}) {
		t.Errorf("an older record: %+v %v", got, err)
	}
	if rec := (&MutationStatus{Version: 7, Status: "error", Error: "boom"}).appendTo(nil); string(rec) != string(old) {
		t.Errorf("a record without a code is not written as before")
	}
	// A truncated code is corrupt, not a shorter code.
	rec := (&MutationStatus{Version: 7, Status: "error", Error: "boom", Code: "boom_code"}).appendTo(nil)
	if _, err := decodeMutationStatus(rec[:len(rec)-2]); err == nil {
		t.Errorf("a truncated code decoded")
	}
}
