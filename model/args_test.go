package model

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/canon-sync/canon/schemas"
)

var argsFields = []string{"collection", "id", "meta", "data"}

var argsCases = []string{
	`{"collection":"tasks","id":"t1","data":{"n":1}}`,
	` { "data" : {"n":1} , "id":"t1",  "collection":"tasks" } `,
	`{}`,
	` {} `,
	`{"data":{"b":1,"a":2},"id":"t1"}`, // a value that is not canonical
	`{"data":1,"data":2}`,              // a repeated field
	`{"collection":"c","extra":1}`,     // an unknown field
	`{"collection":"c","id":"\u0069"}`, // an escape jcs does not write
	`{"collection":"c","id":1.0}`,      // a number jcs rewrites
	`{"collection":"c"`,                // truncated
	`{"collection":"c"}x`,              // trailing garbage
	`{"collection":"c",}`,              //
	`["collection"]`,                   //
	`{"meta":{},"data":null,"id":"x"}`, //
}

// slowArgs is parseArgs without its quick path: the whole object
// canonicalized by jcs, then walked.
func slowArgs(raw json.RawMessage, fields ...string) (args, error) {
	canon, err := Canonical(raw)
	if err != nil {
		return nil, err
	}
	var a args
	if _, ok := schemas.JSONMemberSpans(canon, 0, 0, func(ks, ke, vs int) int {
		ve, _ := schemas.CheckJSONValue(canon, vs, 1)
		if ve >= 0 {
			a = append(a, argMember{name: canon[ks:ke], val: canon[vs:ve]})
		}
		return ve
	}); !ok {
		return a, errNotCanonical
	}
	return a, nil
}

// quickArgs answers only what the canonical form would, and leaves
// everything else to the full path.
func TestQuickArgs(t *testing.T) {
	for _, in := range argsCases {
		checkQuickArgs(t, []byte(in))
	}
	// The common args take the quick path.
	for _, in := range argsCases[:4] {
		if _, ok := quickArgs([]byte(in), argsFields); !ok {
			t.Errorf("quickArgs(%s) declines", in)
		}
	}
}

func checkQuickArgs(t *testing.T, raw []byte) {
	t.Helper()
	a, ok := quickArgs(raw, argsFields)
	if !ok {
		return
	}
	if !json.Valid(raw) {
		t.Fatalf("quickArgs(%q) accepts invalid JSON", raw)
	}
	want, err := slowArgs(raw)
	if err != nil {
		t.Fatalf("quickArgs(%q) = %q, but canonicalizing fails: %v", raw, a, err)
	}
	if len(want) == 0 {
		want = args{}
	}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("quickArgs(%q) = %q, canonical members %q", raw, a, want)
	}
	for _, m := range a {
		if !knownField(m.name[1:len(m.name)-1], argsFields) {
			t.Fatalf("quickArgs(%q) accepts field %s", raw, m.name)
		}
	}
}

func FuzzQuickArgs(f *testing.F) {
	for _, in := range argsCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkQuickArgs(t, raw)
	})
}
