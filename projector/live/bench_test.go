package live

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// fanout is a live server without Kafka: the benchmark publishes into its
// hub directly, and real websocket clients read over loopback, in a
// process of their own (see fanoutClientEnv).
type fanout struct {
	s       *Server
	srv     *httptest.Server
	clients *clientProcess
	// project[i] is the project of connection i.
	project []int
	// subs are the server's subscribers, whose queues pace "max".
	subs []*subscriber
	// pub[project][version] is the publish time in ns.
	pub [][]atomic.Int64
}

func newFanout(b *testing.B, projects, subsPerProject, versions int) *fanout {
	b.Helper()
	st, err := store.Open(store.Config{Dir: b.TempDir(), Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	// The writers send a version only once the store holds its changelog
	// offset; the hub gets versions without a store, whose offset is set
	// past them all.
	if err := st.Apply(0, nil, int64(versions)+1); err != nil {
		b.Fatal(err)
	}
	keys := auth.NewKeyset()
	if err := keys.Generate("k"); err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Store: st, Keys: keys.VerifyOnly(), Registerer: prometheus.NewRegistry(), QueueSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Mount(mux)
	f := &fanout{s: s, srv: httptest.NewServer(mux), pub: make([][]atomic.Int64, projects)}
	b.Cleanup(f.srv.Close)
	c := auth.Claims{Org: "bench", Projects: []string{"*"}, Scopes: []string{auth.ScopeRead}}
	c.Subject = "bench"
	tok, err := keys.Issue(c, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	cfg := fanoutClientConfig{Header: bearer(tok), Hello: true, Versions: uint64(versions)}
	base := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/v1/projects/bench/"
	for p := range projects {
		f.pub[p] = make([]atomic.Int64, versions+1)
		for range subsPerProject {
			cfg.URLs = append(cfg.URLs, fmt.Sprintf("%sp%d/ws", base, p))
			f.project = append(f.project, p)
		}
	}
	f.clients = startClients(b, cfg)
	canontest.WaitFor(b, time.Minute, "subscribers", func() (bool, error) {
		f.s.hub.mu.RLock()
		defer f.s.hub.mu.RUnlock()
		f.subs = f.subs[:0]
		for _, br := range f.s.hub.subs {
			for s := range br["main"] {
				f.subs = append(f.subs, s)
			}
		}
		return len(f.subs) == len(f.project), nil
	})
	return f
}

// over tells whether any subscriber has more than window versions queued.
func (f *fanout) over(window int) bool {
	return slices.ContainsFunc(f.subs, func(s *subscriber) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue) > window
	})
}

// latencies are the clients' receive times less the publish times, in ns,
// sorted; they fail the benchmark unless every connection read every
// version once and in order.
func latencies(b *testing.B, res [][]received, project []int, pub [][]atomic.Int64, versions int) []int64 {
	b.Helper()
	if len(res) != len(project) {
		b.Fatalf("results of %d connections, want %d", len(res), len(project))
	}
	lat := make([]int64, 0, len(res)*versions)
	for i, rs := range res {
		if len(rs) != versions {
			b.Fatalf("connection %d read %d versions, want %d", i, len(rs), versions)
		}
		for j, r := range rs {
			if r.version != uint64(j+1) {
				b.Fatalf("connection %d read version %d as its message %d", i, r.version, j+1)
			}
			lat = append(lat, r.at-pub[project[i]][r.version].Load())
		}
	}
	slices.Sort(lat)
	return lat
}

func reportLatencies(b *testing.B, lat []int64, elapsed time.Duration) {
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}

func benchVersion(project int, v uint64) *schemas.Version {
	return &schemas.Version{Org: "bench", Project: fmt.Sprintf("p%d", project), Branch: "main", Version: v, Parent: v - 1,
		TS: time.Now().UnixMilli(), Scalars: map[string]json.RawMessage{"name": json.RawMessage(`"Roadmap"`)},
		Items: []schemas.ItemChange{{Collection: "todos", ID: fmt.Sprintf("t%d", v), Op: schemas.OpPut, Meta: json.RawMessage(`{"done":false}`),
			Hash: strings.Repeat("ab", 32), Size: 120, Chunks: []string{strings.Repeat("ab", 32)}}},
		Mutations: []schemas.Outcome{{ClientGroup: "g1", Client: "c1", ID: v, Name: "item.put", Status: schemas.StatusApplied}},
		LastIDs:   map[string]uint64{"c1": v}, StateHash: strings.Repeat("cd", 32)}
}

// run publishes versions 1..n to every project, a round per tick (or, when
// tick is 0, as fast as the server drains its queues, with at most window
// versions waiting in any), and reports delivered messages per second and
// the latency percentiles, from publishing to a client's read.
func (f *fanout) run(b *testing.B, projects, n int, tick time.Duration, window int) {
	// One version per project, renumbered each round: the hub encodes a
	// version when it is published and keeps only the bytes, so building
	// all n rounds up front would only grow the heap the GC scans.
	vs := make([]*schemas.Version, projects)
	for p := range projects {
		vs[p] = benchVersion(p, 1)
	}
	b.ResetTimer()
	start := time.Now()
	for v := 1; v <= n; v++ {
		// Unpaced, latency counts from each version's publishing.
		due := pace(start, v, tick, func() bool { return f.over(window) })
		for p := range projects {
			x := vs[p]
			x.Version, x.Parent, x.Mutations[0].ID, x.LastIDs["c1"] = uint64(v), uint64(v-1), uint64(v), uint64(v)
			if tick == 0 {
				due = time.Now()
			}
			f.pub[p][v].Store(due.UnixNano())
			f.s.hub.publishVersion(changelog.Event{Partition: 0, Offset: int64(v), Timestamp: time.Now().UnixMilli(), Version: x})
		}
	}
	res := f.clients.wait(b)
	elapsed := time.Since(start)
	b.StopTimer()
	reportLatencies(b, latencies(b, res, f.project, f.pub, n), elapsed)
	if o := f.s.m.overflows; readCounter(o) > 0 {
		b.Fatalf("%v queues overflowed", readCounter(o))
	}
}

func readCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// Fan-out of the hub to real websocket clients over loopback: b.N
// versions published to 1,000 subscribers of one project, or to each of
// 1,000 projects with one subscriber. "max" publishes as fast as the
// server drains (at most fanoutWindow versions queued for any
// subscriber); "200k" publishes a round every 5ms, 200,000 messages a
// second, and counts latency from when each round was due.
func BenchmarkFanOut(b *testing.B) {
	for _, shape := range []struct {
		name              string
		projects, perProj int
	}{{"1project-1000subs", 1, 1000}, {"1000projects-1sub", 1000, 1}} {
		for _, mode := range fanoutModes {
			b.Run(shape.name+"/"+mode.name, func(b *testing.B) {
				f := newFanout(b, shape.projects, shape.perProj, b.N)
				f.run(b, shape.projects, b.N, mode.tick, fanoutWindow)
			})
		}
	}
}

// The baseline: the same bytes written to the same number of loopback
// websockets by one goroutine per connection, without the hub, queues or
// subscription logic, as fast as the slowest client drains ("max") or a
// round every 5ms ("200k"), like BenchmarkFanOut; as gorilla's prepared
// messages ("prepared") or as frames written to the connection
// ("frames"), what a subscriber's writer has queued in one writev.
func BenchmarkRawWrites(b *testing.B) {
	for _, mode := range fanoutModes {
		for _, w := range writers {
			b.Run(mode.name+"/"+w.name, func(b *testing.B) { rawWrites(b, mode.tick, fanoutWindow, w.prepared) })
		}
	}
}

// writers are the two ways of writing a message encoded once to many
// sockets: gorilla's prepared messages, or frames written beside the
// library, several in one writev, which is what the server does.
var writers = []struct {
	name     string
	prepared bool
}{{"frames", false}, {"prepared", true}}

func rawWrites(b *testing.B, tick time.Duration, window int, prepared bool) {
	const conns = 1000
	up := websocket.Upgrader{WriteBufferPool: &sync.Pool{}}
	serverConns := make(chan *websocket.Conn, conns)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		serverConns <- ws
	}))
	defer srv.Close()
	pub := [][]atomic.Int64{make([]atomic.Int64, b.N+1)}
	cfg := fanoutClientConfig{Versions: uint64(b.N)}
	for range conns {
		cfg.URLs = append(cfg.URLs, "ws"+strings.TrimPrefix(srv.URL, "http"))
	}
	clients := startClients(b, cfg)
	var server []*websocket.Conn
	for range conns {
		server = append(server, <-serverConns)
	}
	defer func() {
		for _, ws := range server {
			_ = ws.Close()
		}
	}()
	pms := make([]*websocket.PreparedMessage, b.N+1)
	frames := make([][]byte, b.N+1)
	for v := 1; v <= b.N; v++ {
		msg, _ := encodeVersion(benchVersion(0, uint64(v)))
		if prepared {
			pms[v], _ = websocket.NewPreparedMessage(websocket.TextMessage, msg)
		} else {
			frames[v] = textFrame(msg)
		}
	}
	queues := make([]chan int, conns)
	var writers sync.WaitGroup
	for i, ws := range server {
		queues[i] = make(chan int, 4096)
		writers.Go(func() {
			var batch net.Buffers
			for v := range queues[i] {
				if prepared {
					if err := ws.WritePreparedMessage(pms[v]); err != nil {
						panic(err)
					}
					continue
				}
				// What is queued goes in one writev, as a subscriber's
				// writer does.
				batch = append(batch[:0], frames[v])
				for more := true; more; {
					select {
					case v, ok := <-queues[i]:
						if !ok {
							more = false
							break
						}
						batch = append(batch, frames[v])
					default:
						more = false
					}
				}
				if _, err := batch.WriteTo(ws.NetConn()); err != nil {
					panic(err)
				}
			}
		})
	}
	b.ResetTimer()
	start := time.Now()
	for v := 1; v <= b.N; v++ {
		due := pace(start, v, tick, func() bool {
			return slices.ContainsFunc(queues, func(q chan int) bool { return len(q) > window })
		})
		pub[0][v].Store(due.UnixNano())
		for _, q := range queues {
			q <- v
		}
	}
	res := clients.wait(b)
	elapsed := time.Since(start)
	b.StopTimer()
	for _, q := range queues {
		close(q)
	}
	writers.Wait()
	reportLatencies(b, latencies(b, res, make([]int, conns), pub, b.N), elapsed)
}

// Hub only: publishing b.N versions to 1,000 subscribers' queues, with a
// consumer per subscriber that empties them (no sockets).
func BenchmarkHubPublish(b *testing.B) {
	h := newHub([]int32{0}, newMetrics(nil), slog.New(slog.DiscardHandler), time.Now)
	const subs = 1000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var delivered atomic.Int64
	for range subs {
		s := newSubscriber(projectKey{"bench", "p0"}, "main", 1<<20)
		s.caughtUp()
		h.subscribe(s, 0)
		wg.Go(func() {
			var spare []entry
			for {
				select {
				case <-s.notify:
					q, _ := s.take(spare)
					delivered.Add(int64(len(q)))
					spare = q
				case <-stop:
					return
				}
			}
		})
	}
	vs := make([]*schemas.Version, b.N)
	for i := range vs {
		vs[i] = benchVersion(0, uint64(i+1))
	}
	b.ResetTimer()
	start := time.Now()
	for i, v := range vs {
		h.publishVersion(changelog.Event{Offset: int64(i), Timestamp: time.Now().UnixMilli(), Version: v})
	}
	for delivered.Load() < int64(b.N*subs) {
		time.Sleep(100 * time.Microsecond)
	}
	b.ReportMetric(float64(b.N*subs)/time.Since(start).Seconds(), "msgs/s")
	close(stop)
	wg.Wait()
}

// Push to websocket through the whole pipeline on the real broker:
// producer, sequencer (Kafka transactions), store, changelog tail, hub,
// socket. 10 clients of 10 projects push one mutation each every 10ms
// (1,000 mutations a second) for b.N rounds; a subscriber per project
// measures from the push call to the version message carrying the
// mutation.
func BenchmarkPushToWebsocket(b *testing.B) {
	e := newEnv(b, nil, 3, nil)
	const projects = 10
	tok := e.token("acme", []string{"*"}, time.Hour, auth.ScopeRead)
	type key struct {
		project int
		id      uint64
	}
	var mu sync.Mutex
	sent := map[key]time.Time{}
	var lat, ack []time.Duration
	var readers sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for p := range projects {
		c, err := dial(b, e.srv, "acme", fmt.Sprintf("bp%d", p), "", bearer(tok), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.close()
		c.expect(wire.TypeHello)
		readers.Go(func() {
			for got := 0; got < b.N; {
				_ = c.ws.SetReadDeadline(time.Now().Add(time.Minute))
				_, raw, err := c.ws.ReadMessage()
				if err != nil {
					if ctx.Err() == nil {
						b.Error(err)
					}
					return
				}
				now := time.Now()
				var v wire.VersionMessage
				if err := json.Unmarshal(raw, &v); err != nil || v.Type != wire.TypeVersion {
					continue
				}
				mu.Lock()
				for _, m := range v.Mutations {
					if t0, ok := sent[key{p, m.ID}]; ok && m.Client == "c" {
						lat = append(lat, now.Sub(t0))
						got++
					}
				}
				mu.Unlock()
			}
		})
	}
	// Warm up the pipeline (group join, transactions) before measuring.
	warm := time.Now()
	for p := range projects {
		if err := e.push("acme", fmt.Sprintf("bp%d", p), "w", 1); err != nil {
			b.Fatal(err)
		}
		e.waitHead("acme", fmt.Sprintf("bp%d", p), "main", 1)
	}
	b.Logf("pipeline warm after %v", time.Since(warm))
	claims := make([]*auth.Claims, projects)
	for p := range projects {
		claims[p] = &auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeWrite}}
		claims[p].Subject = fmt.Sprintf("bench%d", p)
	}
	b.ResetTimer()
	start := time.Now()
	// One pusher per project, in order: a client's ids must arrive in
	// order, so a push waits for the previous one's acknowledgement.
	var pushers sync.WaitGroup
	for p := range projects {
		pushers.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for round := range b.N {
				<-tick.C
				id := uint64(round + 1)
				t0 := time.Now()
				mu.Lock()
				sent[key{p, id}] = t0
				mu.Unlock()
				_, perr := e.prod.Push(ctx, claims[p], "acme", fmt.Sprintf("bp%d", p), wire.PushRequest{ClientGroup: "g", Mutations: []wire.PushMutation{
					{Client: "c", ID: id, Name: "item.put", Args: json.RawMessage(fmt.Sprintf(`{"collection":"c","id":"x","data":%d}`, id))}}})
				if perr != nil {
					b.Error(perr)
					return
				}
				mu.Lock()
				ack = append(ack, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	pushers.Wait()
	readers.Wait()
	b.StopTimer()
	cancel()
	pct := func(d []time.Duration, q int) float64 {
		slices.Sort(d)
		return float64(d[len(d)*q/100]) / 1e6
	}
	b.ReportMetric(float64(projects*b.N)/time.Since(start).Seconds(), "mutations/s")
	b.ReportMetric(pct(lat, 50), "p50-ms")
	b.ReportMetric(pct(lat, 99), "p99-ms")
	b.ReportMetric(pct(ack, 50), "ack-p50-ms")
	b.ReportMetric(pct(ack, 99), "ack-p99-ms")
	var m dto.Metric
	_ = e.live.m.publishLag.Write(&m)
	if h := m.GetHistogram(); h.GetSampleCount() > 0 {
		b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1e3, "record-to-hub-mean-ms")
	}
}

// fanoutModes: "max" publishes as fast as the server drains, "200k" a
// round of 1,000 messages every 5ms.
var fanoutModes = []struct {
	name string
	tick time.Duration
}{{"max", 0}, {"200k", 5 * time.Millisecond}}

// pace waits for round v of a run that started at start and returns the
// time its latency counts from. Paced (tick > 0), that is when the round
// was due, even if it goes out late: a late round waited too (no
// coordinated omission). Unpaced, it waits while over says a queue is too
// long and returns the time it stopped waiting.
func pace(start time.Time, v int, tick time.Duration, over func() bool) time.Time {
	if tick > 0 {
		due := start.Add(time.Duration(v) * tick)
		time.Sleep(time.Until(due))
		return due
	}
	for over() {
		time.Sleep(100 * time.Microsecond)
	}
	return time.Now()
}

// fanoutWindow is how many versions "max" lets wait in any queue. A
// deeper window buys throughput with queueing: with 64, one project of
// 1,000 subscribers went from about 0.94M to 1.36M messages a second and
// its p99 from 23 ms to 101 ms.
const fanoutWindow = 16
