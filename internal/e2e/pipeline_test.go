package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/store"
)

// pipeline is Canon's write path in this process on the real broker
// (canontest's stack): topics of their own, a sequencer with its store
// (unless noSequencer), and the producer serving HTTP.
type pipeline struct {
	stack *canontest.Stack
	kcfg  kafka.ClientConfig
	info  kafka.TopicsInfo
	group string
	store *store.Store
	keys  *auth.Keyset
	url   string
}

func startPipeline(t testing.TB, partitions int32, noSequencer ...bool) *pipeline {
	t.Helper()
	s := canontest.Start(t, canontest.Options{Partitions: partitions, NoSequencer: len(noSequencer) > 0 && noSequencer[0]})
	pl := &pipeline{stack: s, kcfg: s.Kafka, info: kafka.TopicsInfo{Names: s.Topics, Partitions: partitions},
		group: s.Group, store: s.Store, keys: s.Keys}
	pl.url = pl.serveProducer(t, producer.Config{Partitions: partitions})
	return pl
}

// serveProducer starts a producer with cfg (Kafka, topics, keys and the
// sequencer group filled in) and returns its URL.
func (pl *pipeline) serveProducer(t testing.TB, cfg producer.Config) string {
	t.Helper()
	// ?wait=applied answers once the read API served here has the
	// outcome, as canon serve's producer does with its store.
	if cfg.Readable == nil {
		cfg.Readable = pl.store.WaitApplied
	}
	p := pl.stack.NewProducer(cfg)
	mux := http.NewServeMux()
	p.Mount(mux)
	// The read API on the same address, as canon dev serves it: a
	// client.Writer asks it for its client's last id.
	rs, err := readapi.New(readapi.Config{Store: pl.store, Keys: pl.keys.VerifyOnly()})
	if err != nil {
		t.Fatal(err)
	}
	rs.Mount(mux)
	return pl.stack.Serve(mux)
}

// token issues a write token of principal "user:<user>" for the projects.
func (pl *pipeline) token(t testing.TB, user string, projects ...string) string {
	t.Helper()
	c := auth.Claims{Org: "acme", Projects: projects, Scopes: []string{auth.ScopeWrite, auth.ScopeRead}}
	c.Subject = "user:" + user
	return pl.stack.Token(t, c, time.Hour)
}
