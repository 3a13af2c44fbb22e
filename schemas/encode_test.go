package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// encodeMutationReflect is EncodeMutation as it was before it wrote the
// record by hand: validation, then encoding/json.
func encodeMutationReflect(m *Mutation, l Limits) ([]byte, error) {
	l = l.orDefaults()
	if err := validateMutation(m, l, top, true); err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaMutationV1, err)
	}
	w := *m
	if len(w.Args) == 0 {
		w.Args = jsonNull
	}
	b, err := marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", SchemaMutationV1, err)
	}
	if len(b) > l.MaxMutationBytes {
		return nil, fmt.Errorf("encode %s: %w: the value is %d bytes, over the limit of %d bytes (MaxMutationBytes): send smaller args",
			SchemaMutationV1, ErrTooLarge, len(b), l.MaxMutationBytes)
	}
	return b, nil
}

// FuzzEncodeMutation checks EncodeMutation against encoding/json: the
// same bytes, or the same error.
func FuzzEncodeMutation(f *testing.F) {
	for _, g := range loadGolden(f, KindMutation, "valid") {
		m, err := DecodeMutation(SchemaMutationV1, g.value, Limits{})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m.Org, m.Project, m.Branch, m.ClientGroup, m.Client, m.ID, m.Name, []byte(m.Args), m.TS, m.Principal, m.ReceivedAt)
	}
	f.Add("acme", "p", "main", "g<&>", "c\u2028\"\\\x01é\xff", uint64(1), "x", []byte(" { \"a\" : [1, \"<\u2029>\"] }\n"), int64(0), "user:a&b", int64(0))
	f.Add("acme", "p", "main", "g", "c", uint64(1), "x", []byte(`{"a":`), int64(-1), "", int64(-1))
	f.Add("acme", "p", "main", "g", "c", uint64(1), "x", []byte(nil), int64(1), "\x7f", int64(2))
	f.Add("Acme", "p", "", "", "", uint64(0), "9", []byte(`nul`), int64(0), "", int64(0))
	f.Add("acme", "p", "main", "g", "c", uint64(1), "x", bytes.Repeat([]byte(" "), 600), int64(0), "", int64(0))
	f.Fuzz(func(t *testing.T, org, project, branch, group, client string, id uint64, name string, args []byte, ts int64, principal string, receivedAt int64) {
		m := &Mutation{Org: org, Project: project, Branch: branch, ClientGroup: group, Client: client, ID: id, Name: name,
			Args: args, TS: ts, Principal: principal, ReceivedAt: receivedAt}
		want, werr := encodeMutationReflect(m, fuzzLimits)
		got, gerr := EncodeMutation(m, fuzzLimits)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("error %v, encoding/json's is %v", gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded\n%s\nencoding/json writes\n%s", got, want)
		}
		// Args checked by the caller: the same value and errors.
		var c bytes.Buffer
		if len(args) == 0 || json.Compact(&c, args) == nil && bytes.Equal(c.Bytes(), args) {
			got, gerr := EncodeCheckedMutation(m, fuzzLimits)
			if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() || !bytes.Equal(got, want) {
				t.Fatalf("EncodeCheckedMutation = %s, %v\nencoding/json: %s, %v", got, gerr, want, werr)
			}
		}
		// Most fuzzed mutations are invalid: compare the writers alone too.
		w := *m
		if len(w.Args) == 0 {
			w.Args = jsonNull
		}
		want, werr = marshal(&w)
		got, ok := appendMutation(nil, m, false)
		if ok != (werr == nil) || ok && !bytes.Equal(got, want) {
			t.Fatalf("appendMutation = %s, %v\nencoding/json writes\n%s, %v", got, ok, want, werr)
		}
	})
}
