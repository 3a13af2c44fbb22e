package live

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// A subscriber's queue: bounded; while catching up, versions that do not
// fit are noted for the store instead of overflowing; afterwards, and for
// rejected records always, a full queue overflows once.
func TestSubscriberQueue(t *testing.T) {
	s := newSubscriber(projectKey{"o", "p"}, "main", 2)
	v := func(n uint64) entry { return entry{version: n, offset: int64(10 * n)} }
	for _, e := range []entry{v(1), v(2), v(3), v(4)} {
		if !s.push(e) {
			t.Fatalf("catching up, version %d overflowed", e.version)
		}
	}
	q, overflow := s.take(nil)
	if overflow || len(q) != 2 || q[0].version != 1 || q[1].version != 2 {
		t.Fatalf("took %v %v", q, overflow)
	}
	if skipped := s.caughtUp(); skipped != 41 {
		t.Fatalf("skipped up to offset %d, want 41", skipped)
	}
	if skipped := s.caughtUp(); skipped != 0 {
		t.Fatalf("skipped %d after a clean round", skipped)
	}
	s.push(v(5))
	s.push(v(6))
	if s.push(v(7)) {
		t.Fatal("a full queue took a live version")
	}
	if !s.push(v(8)) {
		t.Fatal("an overflow was reported twice")
	}
	if q, overflow := s.take(q); !overflow || len(q) != 0 {
		t.Fatalf("after the overflow: %v %v", q, overflow)
	}

	r := newSubscriber(projectKey{"o", "p"}, "main", 1)
	r.push(entry{})
	if r.push(entry{}) {
		t.Fatal("catching up, a rejected record over the limit did not overflow")
	}
}

// gate holds a replica's applies while closed.
type gate struct {
	mu     sync.Mutex
	open   bool
	opened chan struct{}
}

func newGate() *gate { return &gate{opened: make(chan struct{})} }

func (g *gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		g.open = true
		close(g.opened)
	}
}

func (g *gate) wait(ctx context.Context) error {
	select {
	case <-g.opened:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startReplica materializes st from canon.versions, as a read replica
// does, applying nothing while g is closed.
func (e *env) startReplica(st *store.Store, g *gate) {
	tail, err := changelog.New(changelog.Config{Kafka: e.kcfg.Aux("replica"), Topics: e.Topics, PartitionCount: e.Partitions, FromStart: true})
	if err != nil {
		e.t.Fatal(err)
	}
	e.Go("replica", func(ctx context.Context) error {
		defer tail.Close()
		for {
			evs, err := tail.Poll(ctx)
			if err == nil {
				err = g.wait(ctx)
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			recs := map[int32][]store.Record{}
			next := map[int32]int64{}
			for _, ev := range evs {
				if ev.Err != nil {
					return ev.Err
				}
				recs[ev.Partition] = append(recs[ev.Partition], store.Record{Chunk: ev.Chunk, Version: ev.Version})
				next[ev.Partition] = ev.Offset + 1
			}
			for p, rs := range recs {
				if err := st.Apply(p, rs, next[p]); err != nil {
					return fmt.Errorf("replica: %w", err)
				}
			}
		}
	})
}

func newEmbeddedEnv(t *testing.T, parts int32) *env {
	emb, err := kafka.StartEmbedded(kafka.EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	return newEnv(t, emb.Brokers(), parts, nil)
}

// A server whose store lags the changelog (a read replica) holds a
// subscription until its store has what the hub already published, and
// fills live versions that run ahead from the store: the subscriber gets
// every version once, in order, whatever the store's lag.
func TestStoreLag(t *testing.T) {
	e := newEmbeddedEnv(t, 2)
	replica := e.openStore()
	g := newGate()
	e.startReplica(replica, g)
	lagging, srv := e.startLive(replica, func(c *Config) {
		c.QueueSize = 4
		c.CatchUpPage = 1
	})

	const first, total = 20, 60
	for id := uint64(1); id <= first; id++ {
		if err := e.push("acme", "lag", "c1", id); err != nil {
			t.Fatal(err)
		}
	}
	e.waitHead("acme", "lag", "main", first)
	p := replica.PartitionOf("acme", "lag")
	canontest.WaitFor(t, time.Minute, "the hub to read the first versions", func() (bool, error) { return lagging.hub.next[p].Load() > 0, nil })

	tok := e.token("acme", []string{"lag"}, time.Hour, auth.ScopeRead)
	// The store holds nothing yet: the subscription waits, and new
	// versions keep coming while the replica catches up.
	var pushes sync.WaitGroup
	pushes.Go(func() {
		canontest.WaitFor(t, time.Minute, "the subscription", func() (bool, error) { return testutil.ToFloat64(lagging.m.subscribers) == 1, nil })
		for id := uint64(first + 1); id <= total; id++ {
			if id == first+5 {
				g.Open()
			}
			if err := e.push("acme", "lag", "c1", id); err != nil {
				t.Error(err)
				return
			}
		}
	})
	vs, resumes := collect(t, srv, bearer(tok), "acme", "lag", 0, total)
	pushes.Wait()
	t.Logf("%d resumes after 4008", resumes)
	// The replica reads the changelog once it is committed; the
	// sequencer writes its own store, the reference here, just after the
	// commit, so it can be a few versions behind what was delivered.
	e.waitHead("acme", "lag", "main", total)
	checkVersions(t, e.st, "acme", "lag", "main", 0, vs)
	t.Logf("%v versions from the store, %v live ones ahead filled from the store",
		testutil.ToFloat64(lagging.m.catchUp), testutil.ToFloat64(lagging.m.storeFills))
}

// A store that stays behind the changelog longer than StoreLagTimeout
// closes the subscription with 1011 instead of letting it miss versions.
func TestStoreBehindCloses(t *testing.T) {
	e := newEmbeddedEnv(t, 1)
	empty := e.openStore()
	behind, srv := e.startLive(empty, func(c *Config) {
		c.StoreLagTimeout = 200 * time.Millisecond
	})
	if err := e.push("acme", "behind", "c1", 1); err != nil {
		t.Fatal(err)
	}
	canontest.WaitFor(t, time.Minute, "the hub to read the version", func() (bool, error) { return behind.hub.next[0].Load() > 0, nil })
	tok := e.token("acme", []string{"behind"}, time.Hour, auth.ScopeRead)
	c, err := dial(t, srv, "acme", "behind", "from=0", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	code, got := c.closeCode()
	if code != wire.CloseServerError || len(got) != 1 || got[0].Error.Code != wire.CodeStoreBehind {
		t.Fatalf("close %d after %v", code, got)
	}

}

// Without a Pusher, the hello says so and push messages get an error.
func TestNoPusher(t *testing.T) {
	e := newEmbeddedEnv(t, 1)
	_, srv := e.startLive(e.st, func(c *Config) { c.Pusher = nil })
	tok := e.token("acme", []string{"np"}, time.Hour, auth.ScopeWrite)
	c, err := dial(t, srv, "acme", "np", "", bearer(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if h := c.expect(wire.TypeHello); !strings.Contains(string(h.raw), `"push":false`) {
		t.Fatalf("hello %s", h.raw)
	}
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"push","requestId":"a","clientGroup":"g","mutations":[{"client":"c","id":1,"name":"item.put","args":{}}]}`)); err != nil {
		t.Fatal(err)
	}
	if m := c.expect(wire.TypeError); m.Error.Code != wire.CodePushDisabled {
		t.Fatalf("push without a pusher: %s", m.raw)
	}
}

// collect reads the versions after from up to total as a client should:
// resuming from the last version it got when closed as slow (4008).
func collect(t *testing.T, srv *httptest.Server, h http.Header, org, project string, from, total uint64) (vs []msg, resumes int) {
	t.Helper()
	for {
		c, err := dial(t, srv, org, project, fmt.Sprintf("from=%d", from+uint64(len(vs))), h, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.expect(wire.TypeHello)
		for from+uint64(len(vs)) < total {
			m, err := c.next(time.Minute)
			if ce := (*websocket.CloseError)(nil); errors.As(err, &ce) && ce.Code == wire.CloseSlow {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			switch m.Type {
			case wire.TypeVersion:
				vs = append(vs, m)
			case wire.TypeError:
				if m.Error.Code != wire.CodeSlow {
					t.Fatalf("unexpected %s", m.raw)
				}
			default:
				t.Fatalf("unexpected %s", m.raw)
			}
		}
		c.close()
		if from+uint64(len(vs)) >= total {
			return vs, resumes
		}
		resumes++
	}
}
