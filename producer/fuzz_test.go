package producer

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
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
		var req wire.PushRequest
		if _, aerr := wire.DecodePush(body, &req); aerr != nil {
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

// FuzzWritePushResponse checks the answer writePushResponse writes
// against writeJSON's.
func FuzzWritePushResponse(f *testing.F) {
	f.Add("c-1", uint64(1), int32(7), int64(42), uint8(2))
	f.Add("<&>\u2028\xff\"", uint64(1<<64-1), int32(-1<<31), int64(-1), uint8(1))
	f.Add("", uint64(0), int32(0), int64(0), uint8(0))
	f.Fuzz(func(t *testing.T, client string, id uint64, partition int32, offset int64, n uint8) {
		ws := []wire.Written{}
		for i := range int(n % 4) {
			ws = append(ws, wire.Written{Client: client, ID: id + uint64(i), Partition: partition, Offset: offset + int64(i)})
		}
		want := httptest.NewRecorder()
		writeJSON(want, http.StatusOK, wire.PushResponse{Mutations: ws})
		got := httptest.NewRecorder()
		writePushResponse(got, http.StatusOK, &wire.PushResponse{Mutations: ws})
		if got.Header().Get("Content-Length") != strconv.Itoa(got.Body.Len()) {
			t.Fatalf("Content-Length %q for %d bytes", got.Header().Get("Content-Length"), got.Body.Len())
		}
		got.Header().Del("Content-Length")
		if got.Body.String() != want.Body.String() || !reflect.DeepEqual(got.Header(), want.Header()) || got.Code != want.Code {
			t.Fatalf("wrote %d %v\n%s\nwriteJSON writes %d %v\n%s", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	})
}
