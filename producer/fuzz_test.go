package producer

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
)

// FuzzPushDecode runs a push body through everything the ingest does
// before producing: strict decoding, validation and encoding. It must never
// panic, refuse with a client error (never a 5xx), and what it accepts must
// decode back as the record the sequencer reads.
func FuzzPushDecode(f *testing.F) {
	for _, seed := range []string{
		`{"clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{"collection":"t","id":"a","data":1}}]}`,
		`{"branch":"dev","clientGroup":"g","mutations":[{"client":"c","id":7,"name":"x","args":null,"ts":5},{"client":"c","id":8,"name":"y","args":[1,2]}]}`,
		`{"clientGroup":"g","mutations":[{"client":"c","id":0,"name":"x","args":{}}]}`,
		`{"clientGroup":7}`,
		`{"mutations":[]}`,
		`[]`, `{`, `{"clientGroup":"g","mutations":[{"client":"\u0000","id":1,"name":"x","args":{}}]}`,
	} {
		f.Add([]byte(seed))
	}
	cfg := Config{Keys: auth.NewKeyset(), MaxBatch: 50}
	cfg.setDefaults()
	p := &Producer{cfg: cfg}
	claims := &auth.Claims{}
	claims.Subject = "user:fuzz"
	now := time.UnixMilli(1_700_000_000_000)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req PushRequest
		if _, aerr := decodePush(body, &req); aerr != nil {
			if aerr.Status >= 500 || aerr.Code == "" || aerr.Message == "" {
				t.Fatalf("bad refusal %+v", aerr)
			}
			return
		}
		ms, aerr := p.mutations("acme", "roadmap", req.Branch, req.ClientGroup, claims, req.Mutations, now)
		if aerr != nil {
			if aerr.Status >= 500 || aerr.Status < 400 {
				t.Fatalf("bad refusal %+v", aerr)
			}
			return
		}
		for i, m := range ms {
			v, err := schemas.EncodeMutation(m, p.cfg.Limits)
			if err != nil {
				if e := fieldError(i, err); e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge {
					t.Fatalf("encode error mapped to %d: %v", e.Status, err)
				}
				continue
			}
			back, err := schemas.DecodeMutation(schemas.SchemaMutationV1, v, p.cfg.Limits)
			if err != nil {
				t.Fatalf("an accepted mutation does not decode: %v\n%s", err, v)
			}
			if back.Client != m.Client || back.ID != m.ID || back.Principal != "user:fuzz" || back.Branch != m.Branch {
				t.Fatalf("round trip changed the mutation: %+v vs %+v", back, m)
			}
		}
	})
}

// pushSeeds are bodies that the fast path of decodePush must either decode
// exactly as encoding/json does or leave to it.
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

// FuzzDecodePush checks decodePush against what it replaces: the same
// request, or the same error, as decodeJSON(body, req, true).
func FuzzDecodePush(f *testing.F) {
	for _, s := range pushSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want, got PushRequest
		werr := decodeJSON(body, &want, true)
		compactArgs, gerr := decodePush(body, &got)
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
		if _, ok := fastDecodePush([]byte(s), &req); ok && decodeJSON([]byte(s), new(PushRequest), true) != nil {
			t.Errorf("the fast path accepts %s, which encoding/json refuses", s)
		}
	}
}

// FuzzWritePushResponse checks the answer writePushResponse writes
// against writeJSON's.
func FuzzWritePushResponse(f *testing.F) {
	f.Add("c-1", uint64(1), int32(7), int64(42), uint8(2))
	f.Add("<&>\u2028\xff\"", uint64(1<<64-1), int32(-1<<31), int64(-1), uint8(1))
	f.Add("", uint64(0), int32(0), int64(0), uint8(0))
	f.Fuzz(func(t *testing.T, client string, id uint64, partition int32, offset int64, n uint8) {
		ws := []Written{}
		for i := range int(n % 4) {
			ws = append(ws, Written{Client: client, ID: id + uint64(i), Partition: partition, Offset: offset + int64(i)})
		}
		want := httptest.NewRecorder()
		writeJSON(want, http.StatusOK, PushResponse{Mutations: ws})
		got := httptest.NewRecorder()
		writePushResponse(got, http.StatusOK, PushResponse{Mutations: ws})
		if got.Header().Get("Content-Length") != strconv.Itoa(got.Body.Len()) {
			t.Fatalf("Content-Length %q for %d bytes", got.Header().Get("Content-Length"), got.Body.Len())
		}
		got.Header().Del("Content-Length")
		if got.Body.String() != want.Body.String() || !reflect.DeepEqual(got.Header(), want.Header()) || got.Code != want.Code {
			t.Fatalf("wrote %d %v\n%s\nwriteJSON writes %d %v\n%s", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	})
}

// FuzzCheckUTF8: a body is refused exactly when it is not UTF-8, always
// with a 400 that has a code and a message, and a field only when the
// field's bytes are at fault.
func FuzzCheckUTF8(f *testing.F) {
	for _, seed := range pushSeeds {
		f.Add([]byte(seed))
	}
	f.Add([]byte("{\"pushVersion\":1,\"clientGroupID\":\"g\",\"mutations\":[{\"clientID\":\"c\xff\",\"id\":1}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		aerr := CheckUTF8(body)
		if (aerr == nil) != utf8.Valid(body) {
			t.Fatalf("CheckUTF8 = %v for a body whose UTF-8 validity is %v", aerr, utf8.Valid(body))
		}
		if aerr != nil && (aerr.Status != http.StatusBadRequest || aerr.Code == "" || aerr.Message == "" ||
			(aerr.Field == "") != (aerr.Code == CodeMalformed)) {
			t.Fatalf("bad refusal %+v", aerr)
		}
	})
}
