// Package canontest is the one harness of Canon's integration tests: a
// stack of Canon's write path on a real broker (package testenv's, or one
// the test gives) in the test process, with a producer and HTTP handlers
// on request, the wait helper every test uses instead of sleeping, and a
// seeded generator of random mutations.
//
// It imports the components it starts (sequencer, producer), so their
// own tests that use it are in external test packages; a component it
// does not import (readapi, projector/live) mounts itself through
// Options.Mount.
package canontest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// Options says what a Stack runs besides its topics and store.
type Options struct {
	// Brokers are the broker's addresses; nil is testenv's real broker.
	Brokers []string
	// Partitions of Canon's topics and of the store; default 2.
	Partitions int32
	// Registry holds the sequencer's mutators; nil is the built-ins.
	Registry *model.Registry
	// Bundles compiles the sequencer's deployed mutator bundles; nil
	// rejects deploys.
	Bundles *model.BundleCache
	// NoSequencer starts no sequencer.
	NoSequencer bool
	// StoreCacheSize is the store's block cache; 0 is the store's default.
	StoreCacheSize int64
	// Producer, when set, starts a producer with this configuration
	// (Kafka, Topics and Keys filled in, and SequencerGroup unless set)
	// and mounts it on the HTTP server.
	Producer *producer.Config
	// Mount, when set, mounts handlers of the test's (a read API) on the
	// HTTP server.
	Mount func(s *Stack, mux *http.ServeMux)
}

// Stack is Canon's write path in the test process: topics of the test's
// own, a store, a sequencer, and optionally a producer and handlers
// served on 127.0.0.1. Everything stops when the test ends, in the
// reverse order of starting.
type Stack struct {
	// Ctx ends when the test's cleanup begins.
	Ctx        context.Context
	Brokers    []string
	Prefix     string // the topics' prefix
	Topics     kafka.TopicNames
	Kafka      kafka.ClientConfig
	Partitions int32
	// Group is the sequencer's consumer group.
	Group string
	Store *store.Store
	// Keys sign the tests' tokens; the producer verifies them.
	Keys *auth.Keyset
	// Producer is nil unless Options.Producer was set.
	Producer *producer.Producer
	// URL is the HTTP server's, "" without producer or handlers.
	URL string
	// Client produces raw records with a manual partitioner.
	Client *kgo.Client
	// Inflight is what the stack's producers are writing, for its
	// sequencer (sequencer.Config.Inflight), as in one `canon serve`
	// process with both roles; Client's records are not counted.
	Inflight *kafka.Inflight

	tb      testing.TB
	cleanup []func()
}

// Start starts a stack for the test.
func Start(tb testing.TB, opt Options) *Stack {
	tb.Helper()
	if opt.Partitions == 0 {
		opt.Partitions = 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stack{Ctx: ctx, Partitions: opt.Partitions, tb: tb, cleanup: []func(){cancel}}
	tb.Cleanup(func() {
		for i := len(s.cleanup) - 1; i >= 0; i-- {
			s.cleanup[i]()
		}
	})
	var info kafka.TopicsInfo
	s.Brokers, s.Prefix, info = Topics(tb, opt.Brokers, opt.Partitions)
	s.Topics = info.Names
	s.Kafka = kafka.ClientConfig{Brokers: s.Brokers}
	s.Group = s.Topics.Mutations + ".seq"
	var err error
	s.Client, err = kgo.NewClient(kgo.SeedBrokers(s.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// A record of 900 KB or 2.5 MB must fit a batch.
		kgo.ProducerBatchMaxBytes(kafka.DefaultMaxMessageBytes))
	if err != nil {
		tb.Fatal(err)
	}
	s.Defer(s.Client.Close)
	s.Store = s.OpenStore(opt.StoreCacheSize)
	s.Keys = auth.NewKeyset()
	if err := s.Keys.Generate("k1"); err != nil {
		tb.Fatal(err)
	}
	if !opt.NoSequencer {
		s.Inflight = kafka.NewInflight(s.Partitions)
		seq, err := sequencer.New(sequencer.Config{Kafka: s.Kafka, Topics: s.Topics, Store: s.Store,
			Group: s.Group, Registry: opt.Registry, Bundles: opt.Bundles, Inflight: s.Inflight})
		if err != nil {
			tb.Fatal(err)
		}
		s.Go("sequencer", seq.Run)
	}
	if opt.Producer == nil && opt.Mount == nil {
		return s
	}
	mux := http.NewServeMux()
	if opt.Producer != nil {
		s.Producer = s.NewProducer(*opt.Producer)
		s.Producer.Mount(mux)
	}
	if opt.Mount != nil {
		opt.Mount(s, mux)
	}
	s.URL = s.Serve(mux)
	return s
}

// Defer runs f when the test ends, before what was started earlier stops.
func (s *Stack) Defer(f func()) { s.cleanup = append(s.cleanup, f) }

// Go runs a component until the test ends, failing the test if it stops
// with an error other than its context's end.
func (s *Stack) Go(name string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(s.Ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	s.Defer(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			s.tb.Errorf("%s: %v", name, err)
		}
	})
}

// OpenStore opens a store of the stack's partitions in a directory of the
// test's, closed after everything started later.
func (s *Stack) OpenStore(cacheSize int64) *store.Store {
	s.tb.Helper()
	st, err := store.Open(store.Config{Dir: s.tb.TempDir(), Partitions: s.Partitions, CacheSize: cacheSize})
	if err != nil {
		s.tb.Fatal(err)
	}
	s.Defer(func() { _ = st.Close() })
	return st
}

// NewProducer starts another producer on the stack's topics and keys:
// it runs until the test ends and is returned once it is ready (it then
// follows the changelog when cfg.Partitions is set).
func (s *Stack) NewProducer(cfg producer.Config) *producer.Producer {
	s.tb.Helper()
	cfg.Kafka, cfg.Topics, cfg.Keys = s.Kafka, s.Topics, s.Keys.VerifyOnly()
	if cfg.SequencerGroup == "" {
		cfg.SequencerGroup = s.Group
	}
	if cfg.Inflight == nil {
		cfg.Inflight = s.Inflight
	}
	p, err := producer.New(cfg)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.Defer(p.Close)
	s.Go("producer", p.Run)
	WaitFor(s.tb, 20*time.Second, "the producer to be ready", func() (bool, error) {
		if err := p.Ready(s.Ctx); err != nil {
			return false, Pending("%v", err)
		}
		return true, nil
	})
	return p
}

// Serve serves h on a free port of 127.0.0.1 until the test ends, and
// returns its URL.
func (s *Stack) Serve(h http.Handler) string {
	srv := httptest.NewServer(h)
	s.Defer(srv.Close)
	return srv.URL
}

// Produce writes mutations to canon.mutations as the ingest does, in
// order, and waits for the broker's acknowledgement.
func (s *Stack) Produce(tb testing.TB, ctx context.Context, ms ...*schemas.Mutation) {
	tb.Helper()
	recs := make([]*kgo.Record, len(ms))
	for i, m := range ms {
		recs[i] = MutationRecord(tb, s.Topics.Mutations, s.Partitions, m)
	}
	if err := s.Client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatalf("produce %d mutations: %v", len(ms), err)
	}
}

// WaitHead waits until the stack's store holds version v of a branch.
func (s *Stack) WaitHead(tb testing.TB, ctx context.Context, org, project, branch string, v uint64) {
	tb.Helper()
	WaitHead(tb, ctx, s.Store, org, project, branch, v)
}

// WaitHead waits until st holds version v of a branch.
func WaitHead(tb testing.TB, ctx context.Context, st *store.Store, org, project, branch string, v uint64) {
	tb.Helper()
	Wait(tb, ctx, fmt.Sprintf("%s/%s@%s at version %d", org, project, branch, v), func() (bool, error) {
		h, err := st.Head(org, project, branch)
		if err != nil {
			return false, err
		}
		if h.Version >= v {
			return true, nil
		}
		return false, Pending("at version %d", h.Version)
	})
}

// Token issues a token of the stack's keys valid for ttl.
func (s *Stack) Token(tb testing.TB, c auth.Claims, ttl time.Duration) string {
	tb.Helper()
	tok, err := s.Keys.Issue(c, ttl, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}
