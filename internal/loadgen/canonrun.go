package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sync/errgroup"

	"github.com/canon-sync/canon/client"
	"github.com/canon-sync/canon/internal/chserver"
)

// CanonResult is what the Canon phase measured.
type CanonResult struct {
	// Pushes is the pushes sent; Mutations the mutations decided
	// (Applied + Errors + Duplicates), ArgsBytes the bytes of their args.
	Pushes, Mutations, Applied, Errors, Duplicates int
	ArgsBytes                                      int64
	// Elapsed is from the first push to the last answer.
	Elapsed time.Duration
	// WebsocketVersions and WebsocketMutations arrived on the websockets.
	WebsocketVersions, WebsocketMutations int
	// ClickHouseVersions and ClickHouseMutations are the rows of the run's
	// projects in ClickHouse at the end (FINAL), ClickHouseApplied the
	// mutations with status applied.
	ClickHouseVersions, ClickHouseMutations, ClickHouseApplied uint64
	// PushToWebsocket, PushToApplied and ClickHouseLag are latencies; see
	// the package comment.
	PushToWebsocket, PushToApplied, ClickHouseLag Latencies
	// CPU is the canon process's CPU time (user + system) from the first
	// push until ClickHouse showed the last version; Allocated its Go heap
	// allocation over the same span; PeakRSS its largest resident set.
	CPU       time.Duration
	Allocated float64
	PeakRSS   int64
	// BrokerCPU is the local broker's CPU time over the same span; 0 when
	// its process was not found.
	BrokerCPU time.Duration
	// ClickHouseCPU is the local ClickHouse server's CPU time over the
	// same span (the mix workload); 0 when its process was not found.
	ClickHouseCPU time.Duration
	// LoadCPU is the load generator's own CPU time over the same span:
	// this process's clients, websockets and ClickHouse polls (Canon runs
	// in a child process of its own).
	LoadCPU time.Duration
	// ClickHouseEvents are the ClickHouse server's counters over the same
	// span (system.events, clickHouseEvents): what it inserted, wrote and
	// merged; nil without ClickHouse.
	ClickHouseEvents map[string]uint64
	// Transactions are the sequencer's committed transactions over the
	// same span, TransactionTime their summed duration (its metrics).
	Transactions    int
	TransactionTime time.Duration
	// Requests are canon's Kafka requests over the same span, by "client
	// request" (canon_kafka_requests_total); empty for a build without
	// that metric.
	Requests map[string]float64
	// RequestBytes are the bytes of those requests and of their responses
	// over the same span, by "client request direction" (direction write
	// or read; canon_kafka_request_bytes_total); empty for a build without
	// that metric.
	RequestBytes map[string]float64

	// samples are push → websocket latencies over time, for the plot.
	samples []sample
	// pushes are each client's pushes (document and size), for the
	// baseline.
	pushes [][]pushed
}

// pushed is what one push held: its document and how many mutations.
type pushed struct{ doc, size int }

// sample is one latency measured at a time since the phase began.
type sample struct{ at, latency time.Duration }

// wsKey is a mutation: ids count per project and client, and a writer of
// the edits workload writes several projects.
type wsKey struct {
	project, client string
	id              uint64
}

// tracker matches what the clients pushed with what the websockets and
// ClickHouse show.
type tracker struct {
	start time.Time

	mu        sync.Mutex
	sent      map[wsKey]time.Time
	wsAt      map[string]map[uint64]time.Time // project → version → arrival
	wsHead    map[string]uint64               // project → highest version on its websocket
	chSeen    map[string]uint64               // project → highest version seen in ClickHouse
	noCH      bool                            // no ClickHouse to wait for (edits workload)
	versions  int
	mutations int
	samples   []sample
	chLags    []time.Duration
	err       error // a websocket message that should not be
}

func (t *tracker) pushed(project, client string, first, last uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := first; id <= last; id++ {
		t.sent[wsKey{project, client, id}] = at
	}
}

// wsMessage is what the benchmark reads of a websocket message.
type wsMessage struct {
	Type      string `json:"type"`
	Project   string `json:"project"`
	Version   uint64 `json:"version"`
	Reason    string `json:"reason"`
	Mutations []struct {
		Client string `json:"client"`
		ID     uint64 `json:"id"`
	} `json:"mutations"`
}

func (t *tracker) onMessage(project string, m *wsMessage, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch m.Type {
	case "hello", "pong", "pushed":
		return
	case "version":
	default:
		if t.err == nil {
			t.err = fmt.Errorf("websocket of %s: unexpected %q message (reason %q)", project, m.Type, m.Reason)
		}
		return
	}
	t.versions++
	t.wsAt[project][m.Version] = at
	t.wsHead[project] = max(t.wsHead[project], m.Version)
	if m.Version <= t.chSeen[project] {
		t.chLags = append(t.chLags, 0) // ClickHouse showed it first
	}
	for _, mu := range m.Mutations {
		k := wsKey{project, mu.Client, mu.ID}
		sent, ok := t.sent[k]
		if !ok {
			if t.err == nil {
				t.err = fmt.Errorf("websocket of %s: version %d holds mutation %s/%d, which was not pushed or arrived twice", project, m.Version, mu.Client, mu.ID)
			}
			continue
		}
		delete(t.sent, k)
		t.mutations++
		t.samples = append(t.samples, sample{at: at.Sub(t.start), latency: at.Sub(sent)})
	}
}

// onClickHouse records that ClickHouse shows project up to version head.
func (t *tracker) onClickHouse(project string, head uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for v := t.chSeen[project] + 1; v <= head; v++ {
		if ws, ok := t.wsAt[project][v]; ok {
			t.chLags = append(t.chLags, at.Sub(ws))
		}
	}
	t.chSeen[project] = max(t.chSeen[project], head)
}

// caughtUp reports whether every pushed mutation arrived on a websocket
// and ClickHouse shows every version that did.
func (t *tracker) caughtUp(decided int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mutations < decided {
		return false
	}
	for p, head := range t.wsHead {
		if head > t.chSeen[p] && !t.noCH {
			return false
		}
	}
	return true
}

func (r *run) runCanon(ctx context.Context) (CanonResult, error) {
	cfg := r.cfg
	var res CanonResult
	t := &tracker{
		sent:   make(map[wsKey]time.Time),
		wsAt:   make(map[string]map[uint64]time.Time),
		wsHead: make(map[string]uint64),
		chSeen: make(map[string]uint64),
		noCH:   r.ch == nil,
	}
	for _, p := range r.projects {
		t.wsAt[p] = make(map[uint64]time.Time)
	}
	if err := r.warmUp(ctx); err != nil {
		return res, fmt.Errorf("warm up: %w", err)
	}
	for _, p := range r.projects {
		t.chSeen[p] = 1 // the warm-up's version
	}

	// One websocket per project, after the warm-up's version: no version
	// of the load is missed.
	readToken, err := r.token("bench:reader", []string{"*"}, "read")
	if err != nil {
		return res, err
	}
	wsctx, stopWS := context.WithCancel(ctx)
	defer stopWS()
	wsg, wsctx := errgroup.WithContext(wsctx)
	for _, p := range r.projects {
		u := strings.Replace(r.canon.base, "http://", "ws://", 1) + "/v1/projects/" + r.org + "/" + p + "/ws?" +
			url.Values{"from": {"1"}, "token": {readToken}}.Encode()
		conn, resp, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
		if err != nil {
			return res, fmt.Errorf("open the websocket of %s: %w", p, err)
		}
		resp.Body.Close()
		conn.SetReadLimit(8 << 20)
		wsg.Go(func() error {
			<-wsctx.Done()
			return conn.Close()
		})
		wsg.Go(func() error {
			for {
				_, data, err := conn.ReadMessage()
				at := time.Now()
				if err != nil {
					if wsctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("websocket of %s: %w", p, err)
				}
				var m wsMessage
				if err := json.Unmarshal(data, &m); err != nil {
					return fmt.Errorf("websocket of %s: %w", p, err)
				}
				t.onMessage(p, &m, at)
			}
		})
	}
	// ClickHouse: the highest version of each project, polled.
	if r.ch != nil {
		wsg.Go(func() error {
			q := "SELECT project, max(version) FROM " + r.database + ".versions WHERE org = ? GROUP BY project"
			for {
				select {
				case <-wsctx.Done():
					return nil
				case <-time.After(cfg.PollInterval):
				}
				rows, err := r.ch.Query(wsctx, q, r.org)
				if err != nil {
					continue // the projector creates the tables; a poll may come first
				}
				at := time.Now()
				for rows.Next() {
					var p string
					var v uint64
					if err := rows.Scan(&p, &v); err == nil {
						t.onClickHouse(p, v, at)
					}
				}
				rows.Close()
			}
		})
	}

	u0, err := r.canon.usage(ctx)
	if err != nil {
		return res, err
	}
	b0 := cpuOf(r.brokerPID)
	ch0 := cpuOf(r.chPID)
	l0 := cpuOf(os.Getpid())
	ev0 := r.clickHouseEvents(ctx)
	tx0, err := r.canon.transactions(ctx)
	if err != nil {
		return res, err
	}
	rq0, err := r.canon.requests(ctx)
	if err != nil {
		return res, err
	}
	rb0, err := r.canon.requestBytes(ctx)
	if err != nil {
		return res, err
	}
	peak := u0.rss
	var peakMu sync.Mutex
	sampleRSS := func() {
		if rss, err := r.canon.rss(); err == nil {
			peakMu.Lock()
			peak = max(peak, rss)
			peakMu.Unlock()
		}
	}
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		for {
			select {
			case <-stopRSS:
				return
			case <-time.After(500 * time.Millisecond):
				sampleRSS()
			}
		}
	}()
	defer func() {
		select {
		case <-stopRSS:
		default:
			close(stopRSS)
		}
		<-rssDone
	}()

	r.log.Info("pushing", "clients", cfg.Clients, "projects", cfg.Projects, "duration", cfg.Duration, "mutations per client", cfg.Mutations)
	t.start = time.Now()
	if cfg.Profile > 0 {
		var prof sync.WaitGroup
		defer prof.Wait()
		for _, p := range []struct {
			file string
			get  func(context.Context, time.Duration, string) error
		}{{"canon.cpu.pprof", r.canon.profile}, {"canon.allocs.pprof", r.canon.allocProfile}} {
			prof.Add(1)
			go func() {
				defer prof.Done()
				path := filepath.Join(r.dir, p.file)
				if err := p.get(ctx, cfg.Profile, path); err != nil {
					r.log.Warn("profile canon", "err", err)
					return
				}
				r.log.Info("canon's profile written", "path", path)
			}()
		}
	}
	res.pushes = make([][]pushed, cfg.Clients)
	var (
		mu      sync.Mutex
		applied []sample
	)
	g, gctx := errgroup.WithContext(ctx)
	for i := range cfg.Clients {
		var projects []string
		for _, d := range cfg.docsOf(i) {
			projects = append(projects, r.projects[d])
		}
		token, err := r.token("bench:"+clientName(i), projects, "write")
		if err != nil {
			return res, err
		}
		g.Go(func() error {
			name := clientName(i)
			c := client.New(r.canon.base, client.WithToken(token))
			writers := make(map[int]*client.Writer)
			src := cfg.newSource(i)
			pace := cfg.newPacer(t.start)
			count := 0
			var local []sample
			var st CanonResult
			for gctx.Err() == nil {
				if (cfg.Mutations > 0 && count >= cfg.Mutations) || (cfg.Mutations == 0 && time.Since(t.start) >= cfg.Duration) {
					break
				}
				if d := pace.wait(time.Now()); d > 0 {
					select {
					case <-gctx.Done():
						return gctx.Err()
					case <-time.After(d):
					}
				}
				p := src.next()
				w := writers[p.doc]
				if w == nil {
					w = c.Writer(r.org, r.projects[p.doc], client.WriterConfig{
						ClientGroup: "g-" + name, Client: name, MaxBatch: cfg.Batch, Wait: 30 * time.Second,
					})
					writers[p.doc] = w
				}
				ops := p.ops
				if cfg.Mutations > 0 {
					ops = ops[:min(len(ops), cfg.Mutations-count)]
				}
				var first, last uint64
				for j, o := range ops {
					id, err := w.Add(o.name, o.args)
					if err != nil {
						return err
					}
					if j == 0 {
						first = id
					}
					last = id
					st.ArgsBytes += int64(len(o.args))
				}
				sent := time.Now()
				t.pushed(r.projects[p.doc], name, first, last, sent)
				outcomes, err := w.Flush(gctx)
				if err != nil {
					return fmt.Errorf("client %s: %w", name, err)
				}
				done := time.Now()
				st.Pushes++
				for _, o := range outcomes {
					switch o.Status {
					case client.Applied:
						st.Applied++
					case client.Errored:
						st.Errors++
						r.log.Warn("a mutation errored", "client", name, "id", o.ID, "error", o.Error)
					case client.Duplicate:
						st.Duplicates++
					}
					local = append(local, sample{at: done.Sub(t.start), latency: done.Sub(sent)})
				}
				count += len(ops)
				mu.Lock()
				res.pushes[i] = append(res.pushes[i], pushed{doc: p.doc, size: len(ops)})
				mu.Unlock()
			}
			mu.Lock()
			defer mu.Unlock()
			applied = append(applied, local...)
			res.Pushes += st.Pushes
			res.Applied += st.Applied
			res.Errors += st.Errors
			res.Duplicates += st.Duplicates
			res.ArgsBytes += st.ArgsBytes
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.Elapsed = time.Since(t.start)
	res.Mutations = res.Applied + res.Errors + res.Duplicates
	res.PushToApplied = latencies(applied)
	r.log.Info("clients done; waiting for the websockets and ClickHouse", "mutations", res.Mutations, "elapsed", res.Elapsed.Round(time.Millisecond))

	// Drain: every mutation on a websocket, every version in ClickHouse.
	deadline := time.Now().Add(cfg.DrainTimeout)
	// A duplicate is a mutation a retried push had already written: it
	// arrived on the websocket once, as applied or errored.
	for !t.caughtUp(res.Mutations) {
		if wsctx.Err() != nil {
			return res, fmt.Errorf("websockets and ClickHouse poll: %w", wsg.Wait())
		}
		if ended, err := r.canon.exited(); ended {
			return res, fmt.Errorf("canon serve exited during the run: %w", err)
		}
		if time.Now().After(deadline) {
			t.mu.Lock()
			defer t.mu.Unlock()
			return res, fmt.Errorf("after %s, %d of %d mutations arrived on the websockets and ClickHouse shows versions %v of %v",
				cfg.DrainTimeout, t.mutations, res.Mutations, t.chSeen, versionCounts(t.wsAt))
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	u1, err := r.canon.usage(ctx)
	if err != nil {
		return res, err
	}
	close(stopRSS)
	<-rssDone
	stopWS()
	if err := wsg.Wait(); err != nil {
		return res, err
	}
	res.CPU = u1.cpu - u0.cpu
	tx1, err := r.canon.transactions(ctx)
	if err != nil {
		return res, err
	}
	res.Transactions, res.TransactionTime = tx1.n-tx0.n, tx1.time-tx0.time
	rq1, err := r.canon.requests(ctx)
	if err != nil {
		return res, err
	}
	res.Requests = delta(rq0, rq1)
	rb1, err := r.canon.requestBytes(ctx)
	if err != nil {
		return res, err
	}
	res.RequestBytes = delta(rb0, rb1)
	// The whole exposition, for what the report does not show (the
	// sequencer's phases, the Kafka round trips).
	if err := r.canon.saveMetrics(ctx, filepath.Join(r.dir, "metrics.txt")); err != nil {
		r.log.Warn("save canon's metrics", "err", err)
	}
	if r.brokerPID != 0 {
		res.BrokerCPU = cpuOf(r.brokerPID) - b0
	}
	if r.chPID != 0 {
		res.ClickHouseCPU = cpuOf(r.chPID) - ch0
	}
	res.LoadCPU = cpuOf(os.Getpid()) - l0
	if ev0 != nil {
		if ev1 := r.clickHouseEvents(ctx); ev1 != nil {
			res.ClickHouseEvents = delta(ev0, ev1)
		}
	}
	res.Allocated = u1.allocated - u0.allocated
	res.PeakRSS = max(peak, u1.rss)

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return res, t.err
	}
	res.WebsocketVersions, res.WebsocketMutations = t.versions, t.mutations
	res.samples = t.samples
	res.PushToWebsocket = latencies(t.samples)
	lags := make([]sample, len(t.chLags))
	for i, l := range t.chLags {
		lags[i] = sample{latency: l}
	}
	res.ClickHouseLag = latencies(lags)
	if r.ch == nil {
		return res, nil
	}

	q := "SELECT (SELECT count() FROM " + r.database + ".versions FINAL WHERE org = ? AND version > 1), " +
		"(SELECT count() FROM " + r.database + ".mutations FINAL WHERE org = ? AND version > 1), " +
		"(SELECT count() FROM " + r.database + ".mutations FINAL WHERE org = ? AND version > 1 AND status = 'applied')"
	if err := r.ch.QueryRow(ctx, q, r.org, r.org, r.org).Scan(&res.ClickHouseVersions, &res.ClickHouseMutations, &res.ClickHouseApplied); err != nil {
		return res, fmt.Errorf("count the run's rows in ClickHouse: %w", err)
	}
	return res, nil
}

// warmUp makes version 1 of every project (a project.set) and waits
// until ClickHouse shows them: the sequencer owns its partitions and the
// projector has made its tables before anything is measured.
func (r *run) warmUp(ctx context.Context) error {
	token, err := r.token("bench:warmup", r.projects, "write")
	if err != nil {
		return err
	}
	c := client.New(r.canon.base, client.WithToken(token))
	for _, p := range r.projects {
		w := c.Writer(r.org, p, client.WriterConfig{ClientGroup: "g-warmup", Client: "warmup", Wait: 30 * time.Second})
		var err error
		if r.cfg.Workload == WorkloadEdits {
			_, err = w.Add("item.put", editObject()) // the object the edits patch
		} else {
			_, err = w.Add("project.set", map[string]any{"name": "bench " + p})
		}
		if err != nil {
			return err
		}
		out, err := w.Flush(ctx)
		if err != nil {
			return err
		}
		if len(out) != 1 || out[0].Status != client.Applied || out[0].Version != 1 {
			return fmt.Errorf("the first push to the new project %s gave %+v, want version 1 applied", p, out)
		}
	}
	if r.ch == nil {
		return nil
	}
	q := "SELECT count() FROM " + r.database + ".versions WHERE org = ?"
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	for {
		var n uint64
		qerr := r.ch.QueryRow(ctx, q, r.org).Scan(&n)
		if qerr == nil && n >= uint64(len(r.projects)) {
			return nil
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("ClickHouse showed %d of the %d warm-up versions within %s", n, len(r.projects), r.cfg.DrainTimeout)
			if qerr != nil {
				err = fmt.Errorf("%w (last error: %w)", err, qerr)
			}
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.PollInterval):
		}
	}
}

func versionCounts(m map[string]map[uint64]time.Time) map[string]int {
	out := make(map[string]int, len(m))
	for p, vs := range m {
		out[p] = len(vs)
	}
	return out
}

// clickHouseEvents are the system.events counters a run reports: the
// server's whole work, Canon's projector being its only writer during
// Canon's run. Nil without ClickHouse or when they cannot be read.
var clickHouseEvents = []string{"InsertQuery", "InsertedRows", "InsertedBytes", "MergedRows",
	"MergedUncompressedBytes", "MergeTreeDataWriterBlocks", "MergeTreeDataWriterBlocksAlreadySorted",
	"MergeTreeDataWriterCompressedBytes", "SelectQuery"}

func (r *run) clickHouseEvents(ctx context.Context) map[string]uint64 {
	if r.ch == nil {
		return nil
	}
	ev, err := chserver.Events(ctx, r.ch, clickHouseEvents...)
	if err != nil {
		r.log.Warn("read ClickHouse's counters", "err", err)
		return nil
	}
	return ev
}

// delta returns the counters of after that grew since before, by how much.
func delta[N uint64 | float64](before, after map[string]N) map[string]N {
	d := map[string]N{}
	for k, n := range after {
		if b := before[k]; n > b {
			d[k] = n - b
		}
	}
	return d
}
