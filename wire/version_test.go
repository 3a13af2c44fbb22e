package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/canon-sync/canon/schemas"
)

// marshalVersion is the reference encoding: the message struct through
// encoding/json.
func marshalVersion(v *schemas.Version) ([]byte, error) {
	m := VersionMessage{Type: TypeVersion, Org: v.Org, Project: v.Project, Branch: v.Branch, Version: v.Version,
		Parent: v.Parent, Base: v.Base, TS: v.TS, StateHash: v.StateHash, Bundle: v.Bundle, Scalars: v.Scalars,
		Items: make([]ItemMessage, len(v.Items)), Mutations: make([]MutationMessage, len(v.Mutations)), LastIDs: v.LastIDs}
	if m.Scalars == nil {
		m.Scalars = map[string]json.RawMessage{}
	}
	if m.LastIDs == nil {
		m.LastIDs = map[string]uint64{}
	}
	for i, it := range v.Items {
		m.Items[i] = ItemMessage{Collection: it.Collection, ID: it.ID, Op: it.Op, Meta: it.Meta, Hash: it.Hash, Size: it.Size}
	}
	for i, o := range v.Mutations {
		m.Mutations[i] = MutationMessage{ClientGroup: o.ClientGroup, Client: o.Client, ID: o.ID, Name: o.Name,
			Status: o.Status, Error: o.Error, Code: o.Code}
	}
	return json.Marshal(m)
}

var trickyStrings = []string{"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnew\nline\rcr\bbs\fff",
	"\x00\x01\x1f\x7f", "héllo wörld ✓ 日本", "line\u2028sep\u2029para", "bad \xff\xfe utf8", "\xe2\x80", "emoji 🎉"}

var trickyRaw = []string{`"Roadmap"`, `{"done":false}`, `{ "a" : [ 1, 2 , 3 ] }`, `"<b>&</b>"`, "\"a\u2028b\"", `null`, `12.5e3`,
	`{"nested":{"x":"y z"}}`, "[\n1,\n2\n]", `"\u003c"`, `true`}

func randomVersion(r *rand.Rand) *schemas.Version {
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	v := &schemas.Version{Org: pick(trickyStrings), Project: pick(trickyStrings), Branch: pick(trickyStrings),
		Version: r.Uint64(), Parent: r.Uint64N(1000), TS: r.Int64() - r.Int64(), StateHash: pick(trickyStrings)}
	if r.IntN(3) == 0 {
		v.Base = &schemas.BranchRef{Branch: pick(trickyStrings), Version: r.Uint64N(1 << 40)}
	}
	if r.IntN(2) == 0 {
		v.Bundle = pick(trickyStrings)
	}
	if r.IntN(4) > 0 {
		v.Scalars = map[string]json.RawMessage{}
		for range r.IntN(4) {
			v.Scalars[pick(trickyStrings)+fmt.Sprint(r.IntN(3))] = json.RawMessage(pick(trickyRaw))
		}
	}
	for range r.IntN(4) {
		it := schemas.ItemChange{Collection: pick(trickyStrings), ID: pick(trickyStrings), Op: pick([]string{schemas.OpPut, schemas.OpDelete})}
		if r.IntN(2) == 0 {
			it.Meta = json.RawMessage(pick(trickyRaw))
		}
		if r.IntN(2) == 0 {
			it.Hash, it.Size = strings.Repeat("ab", 32), r.Int64N(1<<30)
		}
		v.Items = append(v.Items, it)
	}
	for range r.IntN(4) {
		o := schemas.Outcome{ClientGroup: pick(trickyStrings), Client: pick(trickyStrings), ID: r.Uint64(), Name: pick(trickyStrings),
			Status: pick([]string{schemas.StatusApplied, schemas.StatusError})}
		if o.Status == schemas.StatusError {
			o.Error = pick(trickyStrings)
			o.Code = pick([]string{"", "mutator_error", "budget_exceeded"})
		}
		v.Mutations = append(v.Mutations, o)
	}
	if r.IntN(4) > 0 {
		v.LastIDs = map[string]uint64{}
		for range r.IntN(4) {
			v.LastIDs[pick(trickyStrings)] = r.Uint64()
		}
	}
	return v
}

func TestEncodeVersionEqualsMarshal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		v := randomVersion(r)
		want, werr := marshalVersion(v)
		got, gerr := EncodeVersion(v)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("#%d: errors differ: marshal %v, encode %v", i, werr, gerr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("#%d: encodings differ\nencode:  %s\nmarshal: %s", i, got, want)
		}
	}
}

func TestEncodeVersionRejectsInvalidRaw(t *testing.T) {
	for _, raw := range []string{`{"a":`, ``, `nul`, `[1,]`} {
		v := &schemas.Version{Scalars: map[string]json.RawMessage{"s": json.RawMessage(raw)}}
		if _, err := EncodeVersion(v); err == nil {
			t.Errorf("scalar %q: encoded without an error", raw)
		}
		if _, err := marshalVersion(v); err == nil {
			t.Errorf("scalar %q: the reference encoded it", raw)
		}
	}
	v := &schemas.Version{Scalars: map[string]json.RawMessage{"s": nil}}
	got, _ := EncodeVersion(v)
	want, _ := marshalVersion(v)
	if !bytes.Equal(got, want) {
		t.Errorf("nil scalar: %s, want %s", got, want)
	}
}

func FuzzEncodeVersion(f *testing.F) {
	f.Add("o", "p", "main", `"v"`, `{"a":1}`, "c", "g", "x")
	f.Add("<&>", "\u2028", "\xff", ` [ 1 ] `, `{"b" : "<"}`, "\t", "\x00", "é")
	f.Fuzz(func(t *testing.T, org, project, branch, scalar, meta, client, group, errMsg string) {
		v := &schemas.Version{Org: org, Project: project, Branch: branch, Version: 3, Parent: 2, TS: 9, StateHash: errMsg,
			Scalars:   map[string]json.RawMessage{client: json.RawMessage(scalar)},
			Items:     []schemas.ItemChange{{Collection: group, ID: client, Op: schemas.OpPut, Meta: json.RawMessage(meta), Hash: org}},
			Mutations: []schemas.Outcome{{ClientGroup: group, Client: client, ID: 1, Name: project, Status: schemas.StatusError, Error: errMsg}},
			LastIDs:   map[string]uint64{client: 1, group: 2}}
		want, werr := marshalVersion(v)
		got, gerr := EncodeVersion(v)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("errors differ: marshal %v, encode %v", werr, gerr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encodings differ\nencode:  %q\nmarshal: %q", got, want)
		}
		if gerr != nil {
			return
		}
		// The round trip: a client that decodes the message reads the
		// version, and writing it again gives the same bytes.
		var back VersionMessage
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("the message does not decode: %v\n%q", err, got)
		}
		if back.Type != TypeVersion || back.Version != v.Version || len(back.Items) != 1 || len(back.Mutations) != 1 {
			t.Fatalf("decoded %+v from %q", back, got)
		}
		if again, err := json.Marshal(back); err != nil || !sameText(again, got) {
			t.Fatalf("encoded\n%q\ndecoded and marshaled again\n%q (%v)", got, again, err)
		}
	})
}

func benchVersion(v uint64) *schemas.Version {
	return &schemas.Version{Org: "bench", Project: "p7", Branch: "main", Version: v, Parent: v - 1,
		TS: time.Now().UnixMilli(), Scalars: map[string]json.RawMessage{"name": json.RawMessage(`"Roadmap"`)},
		Items: []schemas.ItemChange{{Collection: "todos", ID: fmt.Sprintf("t%d", v), Op: schemas.OpPut, Meta: json.RawMessage(`{"done":false}`),
			Hash: strings.Repeat("ab", 32), Size: 120, Chunks: []string{strings.Repeat("ab", 32)}}},
		Mutations: []schemas.Outcome{{ClientGroup: "g1", Client: "c1", ID: v, Name: "item.put", Status: schemas.StatusApplied}},
		LastIDs:   map[string]uint64{"c1": v}, StateHash: strings.Repeat("cd", 32)}
}

func BenchmarkEncodeVersion(b *testing.B) {
	v := benchVersion(42)
	b.Run("reflect", func(b *testing.B) {
		for b.Loop() {
			if _, err := marshalVersion(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, VersionSize(v))
		for b.Loop() {
			if _, err := AppendVersion(buf, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
