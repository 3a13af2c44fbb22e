package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzEncodePush checks EncodePush against what it replaces, the bytes or
// the error of json.Marshal, and that DecodePush reads back what it
// wrote.
func FuzzEncodePush(f *testing.F) {
	f.Add("", "g", "c", uint64(1), "item.put", []byte(`{"collection":"t","id":"a","data":{"title":"x"}}`), int64(0), uint8(1), false, false)
	f.Add("dev", "g<1>", "c&\u2028", uint64(1<<63), "x", []byte(" { \"a\" : [ 1 , \"<b>&\u2029\" ] }\n"), int64(-1), uint8(3), false, false)
	f.Add("b\"\\", "\x00\xff", "c", uint64(0), "é", []byte(nil), int64(5), uint8(2), true, false)
	f.Add("", "", "", uint64(0), "", []byte{}, int64(0), uint8(1), false, false)
	f.Add("", "g", "c", uint64(1), "x", []byte(`{"a":`), int64(0), uint8(1), false, false)
	f.Add("", "g", "c", uint64(1), "x", []byte(`1 2`), int64(0), uint8(0), false, true)
	f.Add("", "g", "c", uint64(1), "x", []byte("\"\xe2\x80\xa8\xe2\x80\""), int64(0), uint8(1), false, false)
	f.Fuzz(func(t *testing.T, branch, group, client string, id uint64, name string, args []byte, ts int64, n uint8, nilArgs, nilMutations bool) {
		p := PushRequest{Branch: branch, ClientGroup: group}
		if !nilMutations {
			p.Mutations = []PushMutation{}
		}
		for i := range int(n % 4) {
			m := PushMutation{Client: client, ID: id + uint64(i), Name: name, Args: args, TS: ts}
			if nilArgs && i%2 == 0 {
				m.Args = nil
			}
			p.Mutations = append(p.Mutations, m)
		}
		want, werr := json.Marshal(p)
		got, gerr := EncodePush(&p)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("error %v, json.Marshal's is %v", gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded\n%q\njson.Marshal writes\n%q", got, want)
		}
		if gerr != nil {
			return
		}
		// The round trip: what the server decodes is what the client
		// encoded (args as json.Marshal writes them, strings with
		// invalid UTF-8 as U+FFFD in both).
		var back PushRequest
		if _, aerr := DecodePush(got, &back); aerr != nil {
			t.Fatalf("DecodePush refuses EncodePush's %q: %v", got, aerr)
		}
		again, err := EncodePush(&back)
		if err != nil || !sameText(again, got) {
			t.Fatalf("encoded\n%q\ndecoded and encoded again\n%q (%v)", got, again, err)
		}
	})
}

// The fast path does encode the pushes clients send (the fuzzer above
// would pass if everything went through json.Marshal).
func TestEncodePushFastPath(t *testing.T) {
	p := PushRequest{ClientGroup: "g", Mutations: []PushMutation{{Client: "c", ID: 1, Name: "item.put", Args: json.RawMessage(`{"a": "<b>"}`), TS: 1}}}
	b, ok := appendPush(nil, &p)
	if want := `{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{"a":"\u003cb\u003e"},"ts":1}]}`; !ok || string(b) != want {
		t.Fatalf("appendPush = %s, %v; want %s", b, ok, want)
	}
	p.Mutations[0].Args = json.RawMessage(`{"a":`)
	if _, err := EncodePush(&p); err == nil || !strings.Contains(err.Error(), "RawMessage") {
		t.Fatalf("args that are not JSON: %v", err)
	}
}

// pushSeeds are bodies that the fast path of DecodePush must either
// decode exactly as encoding/json does or leave to it.
var pushSeeds = []string{
	`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{"collection":"t","id":"a","data":1}}]}`,
	` { "branch" : "dev" , "clientGroup":"g", "mutations" : [ {"client":"c","id":7,"name":"x","args": { "a" : [1, 2 ] } ,"ts":-5} , {"client":"c","id":8,"name":"y","args":[1,2]} ] } ` + "\n",
	`{"clientGroup":"g","mutations":[]}`,
	`{"clientGroup":"g","mutations":null}`,
	`{"clientGroup":"g","mutations":[null]}`,
	`{"clientGroup":null,"branch":null}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"x","args":null,"ts":null}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"x"}]}`,
	`{"ClientGroup":"g","MUTATIONS":[{"Client":"c","iD":1,"name":"x","args":{}}]}`,
	`{"clientGroup":"a","clientGroup":"b"}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":1,"id":2,"name":"x","args":{}}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"x","args":{}}],"mutations":[{"client":"d","id":2}]}`,
	`{"client\u0047roup":"g","mutations":[]}`,
	`{"clientGroup":"g\u00e9\n","mutations":[{"client":"\ud800","id":1,"name":"x","args":"\u2028<&>"}]}`,
	"{\"clientGroup\":\"\xff\xfe\",\"mutations\":[{\"client\":\"caf\xc3\xa9\",\"id\":1,\"name\":\"x\",\"args\":\"\xff\"}]}",
	`{"clientGroup":"g","mutations":[{"client":"c","id":18446744073709551615,"name":"x","args":{},"ts":-9223372036854775808}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":18446744073709551616,"name":"x","args":{}}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":-0,"name":"x","args":{},"ts":-0}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":1e3,"name":"x","args":{},"ts":1.0}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":"1","name":"x","args":{}}]}`,
	`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"x","args":{},"extra":true}]}`,
	`{"clientGroup":"g","mutations":{}}`,
	`{"clientGroup":"g"}{}`, `{"clientGroup":"g"} x`, `null`, `[]`, `"x"`, ``, ` `, `{`, `{"a":}`,
}

// FuzzDecodePush checks DecodePush against what it replaces: the same
// request, or the same error, as DecodeJSON(body, req, true).
func FuzzDecodePush(f *testing.F) {
	for _, s := range pushSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want, got PushRequest
		werr := DecodeJSON(body, &want, true)
		compactArgs, gerr := DecodePush(body, &got)
		if !reflect.DeepEqual(gerr, werr) {
			t.Fatalf("error %+v, encoding/json's is %+v", gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n%#v\nencoding/json decodes\n%#v", got, want)
		}
		// What write takes for compact JSON is compact JSON.
		if compactArgs != nil && len(compactArgs) != len(got.Mutations) {
			t.Fatalf("%d compact flags for %d mutations", len(compactArgs), len(got.Mutations))
		}
		for i, c := range compactArgs {
			args := got.Mutations[i].Args
			var buf bytes.Buffer
			if c != (len(args) > 0 && json.Compact(&buf, args) == nil && bytes.Equal(buf.Bytes(), args)) {
				t.Fatalf("mutation %d: args %q compact: %v", i, args, c)
			}
		}
	})
}

// The fast path does decode the bodies clients send (the fuzzer above
// would pass if everything fell back to encoding/json).
func TestDecodePushFastPath(t *testing.T) {
	for _, s := range pushSeeds[:3] {
		var req PushRequest
		if _, ok := fastDecodePush([]byte(s), &req); !ok {
			t.Errorf("the fast path refuses %s", s)
		}
	}
	for _, s := range pushSeeds[3:] {
		var req PushRequest
		if _, ok := fastDecodePush([]byte(s), &req); ok && DecodeJSON([]byte(s), new(PushRequest), true) != nil {
			t.Errorf("the fast path accepts %s, which encoding/json refuses", s)
		}
	}
}

// FuzzAppendPushResponse checks AppendPushResponse against what it
// replaces, a json.Encoder's bytes, and that DecodePushResponse reads
// back what it wrote.
func FuzzAppendPushResponse(f *testing.F) {
	f.Add("c-1", uint64(1), int32(7), int64(42), uint8(2), false)
	f.Add("<&>\u2028\xff\"", uint64(1<<64-1), int32(-1<<31), int64(-1), uint8(1), false)
	f.Add("", uint64(0), int32(0), int64(0), uint8(0), false)
	f.Add("c", uint64(3), int32(1), int64(9), uint8(1), true)
	for n := range uint8(64) {
		f.Add("c<\u2028\"", uint64(n), int32(n), int64(n), n, true)
	}
	f.Fuzz(func(t *testing.T, client string, id uint64, partition int32, offset int64, n uint8, outcomes bool) {
		resp := PushResponse{Mutations: []Written{}}
		for i := range int(n % 4) {
			w := Written{Client: client, ID: id + uint64(i), Partition: partition, Offset: offset + int64(i)}
			resp.Mutations = append(resp.Mutations, w)
			if outcomes {
				resp.Outcomes = append(resp.Outcomes, fuzzOutcome(w, client, id, n+uint8(i)))
			}
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(resp); err != nil {
			t.Fatal(err)
		}
		got := AppendPushResponse(nil, &resp)
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("appended\n%q\na json.Encoder writes\n%q", got, want.Bytes())
		}
		var back, ref PushResponse
		if err := DecodePushResponse(got, &back); err != nil {
			t.Fatalf("DecodePushResponse refuses AppendPushResponse's %q: %v", got, err)
		}
		if err := json.Unmarshal(got, &ref); err != nil || !reflect.DeepEqual(back, ref) {
			t.Fatalf("decoded %#v, json.Unmarshal decodes %#v (%v)", back, ref, err)
		}
		if again := AppendPushResponse(nil, &back); !sameText(again, got) {
			t.Fatalf("appended\n%q\ndecoded and appended again\n%q", got, again)
		}
	})
}

// fuzzOutcome is an outcome of w with the members that bits of n choose
// set to s or v, of a status that n chooses.
func fuzzOutcome(w Written, s string, v uint64, n uint8) Outcome {
	o := Outcome{Written: w, Status: []string{OutcomeApplied, OutcomeError, OutcomeRejected, OutcomeDuplicate, OutcomeTimeout}[n%5]}
	pick := func(bit uint8) bool { return n>>bit&1 == 1 }
	if pick(1) {
		o.Branch, o.Version = s, v
	}
	if pick(2) {
		o.Error, o.Code = s, s
	}
	if pick(3) {
		o.Reason, o.Message = s, s
	}
	if pick(4) {
		o.ExpectedID = v
	}
	if pick(5) {
		o.Version = 0
	}
	return o
}

// BenchmarkAppendPushResponse measures the answer to a waited push of 10
// mutations against encoding/json's, which it replaced.
func BenchmarkAppendPushResponse(b *testing.B) {
	resp := PushResponse{}
	for i := range 10 {
		w := Written{Client: "client-0123456789", ID: uint64(1000 + i), Partition: 3, Offset: int64(123456 + i)}
		resp.Mutations = append(resp.Mutations, w)
		resp.Outcomes = append(resp.Outcomes, Outcome{Written: w, Status: OutcomeApplied, Branch: "main", Version: uint64(5000 + i)})
	}
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = AppendPushResponse(make([]byte, 0, PushResponseSize(len(resp.Mutations), true)), &resp)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			_ = json.NewEncoder(&buf).Encode(&resp)
		}
	})
}

// FuzzDecodePushResponse checks DecodePushResponse against what it
// replaces: the same answer, or the same error, as json.Unmarshal.
func FuzzDecodePushResponse(f *testing.F) {
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
		var want, got PushResponse
		werr := json.Unmarshal(data, &want)
		gerr := DecodePushResponse(data, &got)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("error %v, json.Unmarshal's is %v", gerr, werr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n%#v\njson.Unmarshal decodes\n%#v", got, want)
		}
	})
}

func TestDecodePushResponseFastPath(t *testing.T) {
	var r PushResponse
	if !fastDecodePushResponse([]byte(`{"mutations":[{"client":"c","id":1,"partition":7,"offset":42}]}`+"\n"), &r) ||
		!reflect.DeepEqual(r, PushResponse{Mutations: []Written{{Client: "c", ID: 1, Partition: 7, Offset: 42}}}) {
		t.Fatalf("fast path: %+v", r)
	}
}

// sameText reports whether a and b are the same, or the same once every
// \ufffd escape is written as the character: encoding/json writes the
// invalid UTF-8 of a string as the escape, and the U+FFFD a decoder reads
// from it as the character.
func sameText(a, b []byte) bool {
	norm := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(`\ufffd`), []byte("\ufffd")) }
	return bytes.Equal(a, b) || bytes.Equal(norm(a), norm(b))
}
