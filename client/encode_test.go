package client

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzEncodePush checks encodePush against what it replaces: the bytes,
// or the error, of json.Marshal.
func FuzzEncodePush(f *testing.F) {
	f.Add("", "g", "c", uint64(1), "item.put", []byte(`{"collection":"t","id":"a","data":{"title":"x"}}`), int64(0), uint8(1), false, false)
	f.Add("dev", "g<1>", "c&\u2028", uint64(1<<63), "x", []byte(" { \"a\" : [ 1 , \"<b>&\u2029\" ] }\n"), int64(-1), uint8(3), false, false)
	f.Add("b\"\\", "\x00\xff", "c", uint64(0), "é", []byte(nil), int64(5), uint8(2), true, false)
	f.Add("", "", "", uint64(0), "", []byte{}, int64(0), uint8(1), false, false)
	f.Add("", "g", "c", uint64(1), "x", []byte(`{"a":`), int64(0), uint8(1), false, false)
	f.Add("", "g", "c", uint64(1), "x", []byte(`1 2`), int64(0), uint8(0), false, true)
	f.Add("", "g", "c", uint64(1), "x", []byte("\"\xe2\x80\xa8\xe2\x80\""), int64(0), uint8(1), false, false)
	f.Fuzz(func(t *testing.T, branch, group, client string, id uint64, name string, args []byte, ts int64, n uint8, nilArgs, nilMutations bool) {
		p := Push{Branch: branch, ClientGroup: group}
		if !nilMutations {
			p.Mutations = []Mutation{}
		}
		for i := range int(n % 4) {
			m := Mutation{Client: client, ID: id + uint64(i), Name: name, Args: args, TS: ts}
			if nilArgs && i%2 == 0 {
				m.Args = nil
			}
			p.Mutations = append(p.Mutations, m)
		}
		want, werr := json.Marshal(p)
		got, gerr := encodePush(&p)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("error %v, json.Marshal's is %v", gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded\n%q\njson.Marshal writes\n%q", got, want)
		}
	})
}

// The fast path does encode the pushes clients send (the fuzzer above
// would pass if everything went through json.Marshal).
func TestEncodePushFastPath(t *testing.T) {
	p := Push{ClientGroup: "g", Mutations: []Mutation{{Client: "c", ID: 1, Name: "item.put", Args: json.RawMessage(`{"a": "<b>"}`), TS: 1}}}
	b, ok := appendPush(nil, &p)
	if want := `{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{"a":"\u003cb\u003e"},"ts":1}]}`; !ok || string(b) != want {
		t.Fatalf("appendPush = %s, %v; want %s", b, ok, want)
	}
	p.Mutations[0].Args = json.RawMessage(`{"a":`)
	if _, err := encodePush(&p); err == nil || !strings.Contains(err.Error(), "RawMessage") {
		t.Fatalf("args that are not JSON: %v", err)
	}
}
