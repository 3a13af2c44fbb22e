package client

import (
	"bytes"
	"encoding/json"
	"reflect"
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

// FuzzDecodeResult checks decodeResult against what it replaces: the
// same Result, or the same error, as json.Unmarshal.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{
		`{"mutations":[{"client":"c-1","id":1,"partition":7,"offset":42},{"client":"c-1","id":2,"partition":7,"offset":43}]}` + "\n",
		`{"mutations":[]}`, `{"mutations":null}`, `{"mutations":[null]}`, `{}`, `null`, `[]`, ``, `{`,
		`{"mutations":[{"client":"c","id":1,"partition":7,"offset":42}],"outcomes":[{"client":"c","id":1,"status":"applied","version":3}]}`,
		`{"Mutations":[{"Client":"c","ID":1}]}`, `{"mutations":[{"client":"c"}],"mutations":[{"id":2}]}`,
		`{"mutations":[{"client":"c","client":"d","id":1,"partition":2147483648,"offset":-1}]}`,
		`{"mutations":[{"client":"\u00e9\xff","id":-1,"partition":1.5,"offset":1e3,"extra":[1]}],"other":true}`,
		`{"mutations":[{"client":"c","id":18446744073709551615,"partition":-2147483648,"offset":-9223372036854775808}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got Result
		werr := json.Unmarshal(data, &want)
		gerr := decodeResult(data, &got)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("error %v, json.Unmarshal's is %v", gerr, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n%#v\njson.Unmarshal decodes\n%#v", got, want)
		}
	})
}

func TestDecodeResultFastPath(t *testing.T) {
	var r Result
	if !fastDecodeResult([]byte(`{"mutations":[{"client":"c","id":1,"partition":7,"offset":42}]}`+"\n"), &r) ||
		!reflect.DeepEqual(r, Result{Mutations: []Written{{Client: "c", ID: 1, Partition: 7, Offset: 42}}}) {
		t.Fatalf("fast path: %+v", r)
	}
}
