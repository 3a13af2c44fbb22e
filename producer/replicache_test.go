package producer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// replicacheBody is a Replicache push (in Replicache's field order: the
// version after the mutations) of n mutations of client rc from id first,
// each with a string of pad bytes in its args.
func replicacheBody(first, n, pad int) string {
	var b strings.Builder
	b.WriteString(`{"profileID":"p","clientGroupID":"cg-1","mutations":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"item.put","args":{"collection":"t","id":"a","data":%q},"timestamp":%d.5,"clientID":"rc"}`,
			first+i, strings.Repeat("x", pad), 4189+i)
	}
	b.WriteString(`],"pushVersion":1,"schemaVersion":""}`)
	return b.String()
}

// readMutations reads n records of the mutations topic, failing on more
// or fewer once the topic's end is reached.
func readMutations(t *testing.T, brokers []string, topic string, n int) []*schemas.Mutation {
	t.Helper()
	if got := countRecords(t, brokers, topic); got != int64(n) {
		t.Fatalf("%d records, want %d", got, n)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ms []*schemas.Mutation
	for len(ms) < n && ctx.Err() == nil {
		for _, r := range cl.PollRecords(ctx, n-len(ms)).Records() {
			m, err := schemas.DecodeMutation(schemas.SchemaMutationV1, r.Value, schemas.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
	}
	if len(ms) != n {
		t.Fatalf("read %d of %d records", len(ms), n)
	}
	return ms
}

// An offline backlog over the push limits is not refused: the longest
// prefix within them is taken and answered {}, so that Replicache's next
// push carries the rest, and a later push of what is left drains it.
func TestReplicachePushTakesAPrefix(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, func(c *Config) { c.Rate, c.Burst = 1e6, 1e6 })
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	push := func(body string) {
		t.Helper()
		if status, out, _ := f.post("/replicache/v1/acme/roadmap/push", tok, "application/json", body); status != 200 || len(out) != 0 {
			t.Fatalf("push of %d bytes: %d %v", len(body), status, out)
		}
	}
	// 1,100 small ones: the first 1,000 (MaxBatch), then the other 100.
	push(replicacheBody(1, 1100, 10))
	if n := countRecords(t, brokers, names.Mutations); n != DefaultMaxBatch {
		t.Fatalf("a push of 1100 wrote %d records, want %d", n, DefaultMaxBatch)
	}
	push(replicacheBody(1001, 100, 10))
	// 45 of 100 KB (4.5 MB, over the 4 MiB body limit): as many as fit.
	big := replicacheBody(1101, 45, 100_000)
	if len(big) <= DefaultMaxBodyBytes {
		t.Fatalf("the body of %d bytes is within the limit", len(big))
	}
	push(big)
	took := int(countRecords(t, brokers, names.Mutations)) - 1100
	t.Logf("a push of 45 mutations of 100 KB (%d bytes) took the first %d", len(big), took)
	if took < 40 || took >= 45 {
		t.Fatalf("a push of 45 mutations of 100 KB wrote %d of them, want the most that fit in %d bytes", took, DefaultMaxBodyBytes)
	}
	push(replicacheBody(1101+took, 45-took, 100_000))
	ms := readMutations(t, brokers, names.Mutations, 1145)
	for i, m := range ms {
		if m.ID != uint64(i+1) {
			t.Fatalf("record %d is mutation %d", i, m.ID)
		}
	}
}

// A Replicache push over MaxReplicacheBodyBytes is refused with 413, read
// or announced.
func TestReplicachePushHardCap(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, func(c *Config) { c.MaxReplicacheBodyBytes = 8 << 20 })
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	status, out, _ := f.post("/replicache/v1/acme/roadmap/push", tok, "application/json", replicacheBody(1, 90, 100_000))
	e, _ := out["error"].(map[string]any)
	if status != 413 || e["code"] != wire.CodeTooLarge || !strings.Contains(fmt.Sprint(e["message"]), "8388608") {
		t.Fatalf("%d %v", status, out)
	}
	if n := countRecords(t, brokers, names.Mutations); n != 0 {
		t.Fatalf("%d records", n)
	}
	if _, err := New(Config{Keys: f.keys, MaxReplicacheBodyBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "MaxReplicacheBodyBytes") {
		t.Fatalf("a hard cap below MaxBodyBytes: %v", err)
	}
}

// Replicache's timestamp is the time since the page loaded, not an epoch
// time: the record's ts is the receive time instead.
func TestReplicachePushTimestamp(t *testing.T) {
	brokers, names := embedded(t)
	f := newFixture(t, brokers, names, nil)
	tok := f.token("user:alice", "acme", []string{"*"}, []string{auth.ScopeWrite}, time.Hour)
	before := time.Now().UnixMilli()
	if status, out, _ := f.post("/replicache/v1/acme/roadmap/push", tok, "application/json", replicacheBody(1, 2, 1)); status != 200 {
		t.Fatalf("%d %v", status, out)
	}
	for _, m := range readMutations(t, brokers, names.Mutations, 2) {
		if m.TS != m.ReceivedAt || m.TS < before {
			t.Fatalf("mutation %d: ts %d, receivedAt %d (pushed after %d)", m.ID, m.TS, m.ReceivedAt, before)
		}
	}
}

// FuzzReplicachePushDecode: the streaming decoder of Replicache pushes
// accepts only valid JSON, keeps a prefix within the limits, and decodes
// a body within them as encoding/json does.
func FuzzReplicachePushDecode(f *testing.F) {
	for _, s := range []string{
		replicacheBody(1, 3, 2),
		`{"pushVersion":1,"clientGroupID":"g","mutations":null}`,
		`{"pushVersion":1,"clientGroupID":"g","mutations":[{"clientID":"c","id":"1"}]}`,
		`{"pushVersion":1,"mutations":{}}`, `{"extra":[1,{"a":2}],"pushVersion":1}`,
		`{"pushVersion":1}{}`, `{"pushVersion":1} x`, `null`, `[]`, ``, `{`, `{"a":}`,
	} {
		f.Add([]byte(s))
	}
	p := &Producer{cfg: Config{MaxBatch: 2, MaxBodyBytes: 200}}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, aerr := p.decodeReplicachePush(bytes.NewReader(body))
		if aerr != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted %q, which is not JSON", body)
		}
		if len(got.Mutations) > max(1, p.cfg.MaxBatch) || len(got.Mutations) > got.sent {
			t.Fatalf("kept %d of %d mutations, over the limit of %d", len(got.Mutations), got.sent, p.cfg.MaxBatch)
		}
		var want replicachePush
		if len(got.Mutations) == got.sent && json.Unmarshal(body, &want) == nil && bytes.Equal(bytes.ToLower(body), body) {
			want.sent = got.sent
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded\n%#v\nencoding/json decodes\n%#v", got, want)
			}
		}
	})
}
