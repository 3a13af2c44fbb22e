package producer

import (
	"net/http"
	"testing"
	"time"

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
		if aerr := decodeJSON(body, &req, true); aerr != nil {
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
