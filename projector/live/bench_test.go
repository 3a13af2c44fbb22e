package live

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/testenv"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// fanout is a live server without Kafka: the benchmark publishes into its
// hub directly, and real websocket clients read over loopback.
type fanout struct {
	s       *Server
	srv     *httptest.Server
	clients []*benchClient
	// pub[project][version] is the publish time in ns.
	pub [][]atomic.Int64
}

type benchClient struct {
	ws      *websocket.Conn
	project int
	got     atomic.Uint64 // last version read
	lat     []int64       // ns, hub publish to client read
}

func newFanout(b *testing.B, projects, subsPerProject, versions int) *fanout {
	b.Helper()
	st, err := store.Open(store.Config{Dir: b.TempDir(), Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
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
	c := auth.Claims{Org: "bench", Projects: []string{"*"}, Scopes: []string{auth.ScopeRead}}
	c.Subject = "bench"
	tok, err := keys.Issue(c, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for p := range projects {
		f.pub[p] = make([]atomic.Int64, versions+1)
		for range subsPerProject {
			cl, err := dial(b, f.srv, "bench", fmt.Sprintf("p%d", p), "", bearer(tok), nil)
			if err != nil {
				b.Fatal(err)
			}
			if m := cl.expect(TypeHello); m.Head != 0 {
				b.Fatalf("hello %s", m.raw)
			}
			f.clients = append(f.clients, &benchClient{ws: cl.ws, project: p, lat: make([]int64, 0, versions)})
		}
	}
	waitFor(b, time.Minute, "subscribers", func() bool {
		f.s.hub.mu.RLock()
		defer f.s.hub.mu.RUnlock()
		n := 0
		for _, br := range f.s.hub.subs {
			n += len(br["main"])
		}
		return n == len(f.clients)
	})
	return f
}

func (f *fanout) close() {
	for _, c := range f.clients {
		_ = c.ws.Close()
	}
	f.srv.Close()
}

// read runs the clients until each has read version last.
func (f *fanout) read(last uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, c := range f.clients {
		wg.Go(func() {
			buf := make([]byte, 0, 1024)
			for c.got.Load() < last {
				_, r, err := c.ws.NextReader()
				if err != nil {
					panic(err)
				}
				buf = buf[:0]
				for {
					if len(buf) == cap(buf) {
						buf = slices.Grow(buf, len(buf))
					}
					n, err := r.Read(buf[len(buf):cap(buf)])
					buf = buf[:len(buf)+n]
					if err == io.EOF {
						break
					}
					if err != nil {
						panic(err)
					}
				}
				now := time.Now().UnixNano()
				v := versionOf(buf)
				c.lat = append(c.lat, now-f.pub[c.project][v].Load())
				c.got.Store(v)
			}
		})
	}
	return &wg
}

// versionOf finds "version":N in a version message without decoding it.
func versionOf(b []byte) uint64 {
	i := bytes.Index(b, []byte(`"version":`))
	if i < 0 {
		panic(fmt.Sprintf("not a version: %s", b))
	}
	b = b[i+len(`"version":`):]
	j := bytes.IndexByte(b, ',')
	v, err := strconv.ParseUint(string(b[:j]), 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

func benchVersion(project int, v uint64) *schemas.Version {
	return &schemas.Version{Org: "bench", Project: fmt.Sprintf("p%d", project), Branch: "main", Version: v, Parent: v - 1,
		TS: time.Now().UnixMilli(), Scalars: map[string]json.RawMessage{"name": json.RawMessage(`"Roadmap"`)},
		Items: []schemas.ItemChange{{Collection: "todos", ID: fmt.Sprintf("t%d", v), Op: schemas.OpPut, Meta: json.RawMessage(`{"done":false}`),
			Hash: strings.Repeat("ab", 32), Size: 120, Chunks: []string{strings.Repeat("ab", 32)}}},
		Mutations: []schemas.Outcome{{ClientGroup: "g1", Client: "c1", ID: v, Name: "item.put", Status: schemas.StatusApplied}},
		LastIDs:   map[string]uint64{"c1": v}, StateHash: strings.Repeat("cd", 32)}
}

// run publishes versions 1..n to every project, a round per tick (or as
// fast as the slowest client allows with at most window versions in
// flight when tick is 0), and reports delivered messages per second and
// the latency percentiles.
func (f *fanout) run(b *testing.B, projects, n int, tick time.Duration, window uint64) {
	// One version per project, renumbered each round: the hub encodes a
	// version when it is published and keeps only the bytes, so building
	// all n rounds up front would only grow the heap the GC scans.
	vs := make([]*schemas.Version, projects)
	for p := range projects {
		vs[p] = benchVersion(p, 1)
	}
	wg := f.read(uint64(n))
	var ticker *time.Ticker
	if tick > 0 {
		ticker = time.NewTicker(tick)
		defer ticker.Stop()
	}
	b.ResetTimer()
	start := time.Now()
	for v := 1; v <= n; v++ {
		if ticker != nil {
			<-ticker.C
		} else {
			for _, c := range f.clients {
				for c.got.Load()+window < uint64(v) {
					time.Sleep(50 * time.Microsecond)
				}
			}
		}
		for p := range projects {
			x := vs[p]
			x.Version, x.Parent, x.Mutations[0].ID, x.LastIDs["c1"] = uint64(v), uint64(v-1), uint64(v), uint64(v)
			f.pub[p][v].Store(time.Now().UnixNano())
			f.s.hub.publishVersion(changelog.Event{Partition: 0, Offset: int64(v), Timestamp: time.Now().UnixMilli(), Version: x})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var lat []int64
	for _, c := range f.clients {
		lat = append(lat, c.lat...)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
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
// slowest client reads (at most 64 versions in flight per subscriber);
// "200k" publishes 200 rounds a second, 200,000 messages a second.
func BenchmarkFanOut(b *testing.B) {
	for _, shape := range []struct {
		name              string
		projects, perProj int
	}{{"1project-1000subs", 1, 1000}, {"1000projects-1sub", 1000, 1}} {
		for _, mode := range []struct {
			name string
			tick time.Duration
		}{{"max", 0}, {"200k", 5 * time.Millisecond}} {
			b.Run(shape.name+"/"+mode.name, func(b *testing.B) {
				f := newFanout(b, shape.projects, shape.perProj, b.N)
				defer f.close()
				f.run(b, shape.projects, b.N, mode.tick, 64)
			})
		}
	}
}

// The baseline: the same bytes written as prepared messages to the same
// number of loopback websockets by one goroutine per connection, without
// the hub, queues or subscription logic.
func BenchmarkRawWrites(b *testing.B) {
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
	f := &fanout{pub: make([][]atomic.Int64, 1)}
	f.pub[0] = make([]atomic.Int64, b.N+1)
	var server []*websocket.Conn
	for range conns {
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			b.Fatal(err)
		}
		f.clients = append(f.clients, &benchClient{ws: ws, lat: make([]int64, 0, b.N)})
		server = append(server, <-serverConns)
	}
	defer func() {
		for _, c := range f.clients {
			_ = c.ws.Close()
		}
		for _, ws := range server {
			_ = ws.Close()
		}
	}()
	pms := make([]*websocket.PreparedMessage, b.N+1)
	for v := 1; v <= b.N; v++ {
		msg, _ := encodeVersion(benchVersion(0, uint64(v)))
		pms[v], _ = websocket.NewPreparedMessage(websocket.TextMessage, msg)
	}
	wg := f.read(uint64(b.N))
	queues := make([]chan int, conns)
	var writers sync.WaitGroup
	for i, ws := range server {
		queues[i] = make(chan int, 4096)
		writers.Go(func() {
			for v := range queues[i] {
				if err := ws.WritePreparedMessage(pms[v]); err != nil {
					panic(err)
				}
			}
		})
	}
	b.ResetTimer()
	start := time.Now()
	for v := 1; v <= b.N; v++ {
		for _, c := range f.clients {
			for c.got.Load()+64 < uint64(v) {
				time.Sleep(50 * time.Microsecond)
			}
		}
		f.pub[0][v].Store(time.Now().UnixNano())
		for _, q := range queues {
			q <- v
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	for _, q := range queues {
		close(q)
	}
	writers.Wait()
	var lat []int64
	for _, c := range f.clients {
		lat = append(lat, c.lat...)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
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
	k := testenv.NewKafka(b)
	e := newEnv(b, k.Brokers, k.Topic(b, ""), 3, nil)
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
		c.expect(TypeHello)
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
				var v VersionMessage
				if err := json.Unmarshal(raw, &v); err != nil || v.Type != TypeVersion {
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
				_, perr := e.prod.Push(ctx, claims[p], "acme", fmt.Sprintf("bp%d", p), producer.PushRequest{ClientGroup: "g", Mutations: []producer.PushMutation{
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
