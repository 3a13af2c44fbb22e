package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/kafka/kafkatest"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// pipeline is Canon's write path in this process on the real broker:
// topics of their own, a sequencer with its store (unless noSequencer),
// and the producer serving HTTP.
type pipeline struct {
	kcfg  kafka.ClientConfig
	info  kafka.TopicsInfo
	group string
	store *store.Store
	keys  *auth.Keyset
	url   string
}

func startPipeline(t testing.TB, ctx context.Context, partitions int32, noSequencer ...bool) *pipeline {
	t.Helper()
	brokers, info := kafkatest.Topics(t, partitions)
	pl := &pipeline{kcfg: kafka.ClientConfig{Brokers: brokers}, info: info, group: "e2e-" + info.Names.Mutations, keys: auth.NewKeyset()}
	var err error
	if pl.store, err = store.Open(store.Config{Dir: t.TempDir(), Partitions: partitions}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.store.Close() })
	if err := pl.keys.Generate("k1"); err != nil {
		t.Fatal(err)
	}
	pl.url = pl.serveProducer(t, producer.Config{Partitions: partitions})
	if len(noSequencer) > 0 && noSequencer[0] {
		return pl
	}
	seq, err := sequencer.New(sequencer.Config{Kafka: pl.kcfg, Topics: info.Names, Store: pl.store, Group: pl.group})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- seq.Run(sctx) }()
	t.Cleanup(func() { scancel(); <-done })
	return pl
}

// serveProducer starts a producer with cfg (Kafka, topics, keys and the
// sequencer group filled in) and returns its URL.
func (pl *pipeline) serveProducer(t testing.TB, cfg producer.Config) string {
	t.Helper()
	cfg.Kafka, cfg.Topics, cfg.Keys = pl.kcfg, pl.info.Names, pl.keys.VerifyOnly()
	if cfg.SequencerGroup == "" {
		cfg.SequencerGroup = pl.group
	}
	p, err := producer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p.Mount(mux)
	// The read API on the same address, as canon dev serves it: a
	// client.Writer asks it for its client's last id.
	rs, err := readapi.New(readapi.Config{Store: pl.store, Keys: pl.keys.VerifyOnly()})
	if err != nil {
		t.Fatal(err)
	}
	rs.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	runProducer(t, p)
	return srv.URL
}

// token issues a write token of principal "user:<user>" for the projects.
func (pl *pipeline) token(t testing.TB, user string, projects ...string) string {
	t.Helper()
	c := auth.Claims{Org: "acme", Projects: projects, Scopes: []string{auth.ScopeWrite, auth.ScopeRead}}
	c.Subject = "user:" + user
	tok, err := pl.keys.Issue(c, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// runProducer runs p until the test ends and returns once it is ready:
// it follows the changelog when its Config.Partitions is set.
func runProducer(t testing.TB, p *producer.Producer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("producer: %v", err)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); p.Ready(ctx) != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the producer is not ready 20s after Run started: %v", p.Ready(ctx))
		}
	}
}
