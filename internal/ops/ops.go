// Package ops serves the operational endpoints of every Canon process:
// /healthz (the process is up), /readyz (it can do its work) and /metrics
// (Prometheus), and runs the HTTP server that carries them.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/canon-sync/canon/internal/httpapi"
)

// CheckTimeout bounds each readiness check.
const CheckTimeout = 2 * time.Second

// Readiness is a set of named checks; the process is ready when all pass.
// Components add theirs (a sequencer is not ready until its partitions are
// restored). It is safe for concurrent use.
type Readiness struct {
	mu     sync.Mutex
	checks map[string]func(context.Context) error
	lags   map[string]func() []PartitionLag
}

// NewReadiness returns an empty set: a process with no checks is ready.
func NewReadiness() *Readiness {
	return &Readiness{checks: make(map[string]func(context.Context) error), lags: make(map[string]func() []PartitionLag)}
}

// PartitionLag is how far one copy of a changelog partition in the
// process's store is behind: the figures /readyz lists, whether ready or
// not.
type PartitionLag struct {
	// Role is why the process holds the copy: "owner" (a sequencer that
	// decides for the partition), "standby" (a sequencer's warm copy) or
	// "replica" (a read replica).
	Role      string `json:"role"`
	Partition int32  `json:"partition"`
	// Records is the changelog offsets the copy has left to apply: for an
	// owner, what its restore has left (0 once restored: it writes its
	// store after each commit); for a standby or a replica, the last
	// stable offset minus the copy's offset, measured every few seconds.
	// -1 while not known yet.
	Records int64 `json:"records"`
}

// AddLags registers or replaces the per-partition lags that component
// name reports on /readyz.
func (r *Readiness) AddLags(name string, lags func() []PartitionLag) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags[name] = lags
}

// Lags returns every component's lags, by name.
func (r *Readiness) Lags() map[string][]PartitionLag {
	r.mu.Lock()
	fs := maps.Clone(r.lags)
	r.mu.Unlock()
	if len(fs) == 0 {
		return nil
	}
	out := make(map[string][]PartitionLag, len(fs))
	for name, f := range fs {
		out[name] = f()
	}
	return out
}

// Add registers or replaces the check called name.
func (r *Readiness) Add(name string, check func(context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = check
}

// Check runs every check concurrently and returns the failures by name.
func (r *Readiness) Check(ctx context.Context) map[string]error {
	r.mu.Lock()
	checks := maps.Clone(r.checks)
	r.mu.Unlock()

	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		failures = map[string]error{}
	)
	for name, check := range checks {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
			defer cancel()
			if err := check(cctx); err != nil {
				mu.Lock()
				failures[name] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failures
}

// readyResponse is the JSON body of /readyz.
type readyResponse struct {
	Ready bool `json:"ready"`
	// Failed names the checks that failed, each with "not ready"; why is
	// in the log, under RequestID.
	Failed    map[string]string `json:"failed,omitempty"`
	RequestID string            `json:"requestId,omitempty"`
	// Lags are the per-partition lags of the components that hold copies
	// of the changelog (sequencer owners and standbys, read replicas).
	Lags map[string][]PartitionLag `json:"lags,omitempty"`
}

// Mount adds /healthz, /readyz and /metrics to mux. /readyz answers
// anyone, so it names the checks that failed but not their errors, which
// name brokers, addresses and files: those go to log with a request id
// that the answer gives. Its per-partition lags are counts only.
func Mount(mux *http.ServeMux, ready *Readiness, gatherer prometheus.Gatherer, log *slog.Logger) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		failures := ready.Check(r.Context())
		resp := readyResponse{Ready: len(failures) == 0, Lags: ready.Lags()}
		if !resp.Ready {
			resp.RequestID = httpapi.NewRequestID()
			resp.Failed = make(map[string]string, len(failures))
			for _, name := range slices.Sorted(maps.Keys(failures)) {
				resp.Failed[name] = "not ready"
				log.Warn("not ready", "request_id", resp.RequestID, "check", name, "err", failures[name])
			}
			w.Header().Set("X-Request-Id", resp.RequestID)
		}
		w.Header().Set("Content-Type", "application/json")
		if !resp.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(resp)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
}

// Timeouts bound what a client may hold of the server: a zero field
// takes its DefaultTimeouts value.
type Timeouts struct {
	// ReadHeader bounds the reading of a request's headers, Read that of
	// the whole request, body included: a client that announces a body
	// and sends nothing is disconnected after Read.
	ReadHeader, Read time.Duration
	// Write bounds a request from the end of its headers to the end of
	// its answer. Handlers that answer later on purpose extend their own
	// deadline (a push with ?wait=applied); a websocket sets its own read
	// and write deadlines on the hijacked connection before every read
	// and write, which replace the server's.
	Write time.Duration
	// Idle is how long a keep-alive connection may wait for its next
	// request before the server closes it.
	Idle time.Duration
}

// DefaultTimeouts are the timeouts of Canon's HTTP server. Write leaves
// room for a 30 s profile of /debug/pprof/profile.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: time.Minute, Idle: time.Minute}

// Serve serves h on ln until ctx ends, then shuts down gracefully, giving
// in-flight requests up to grace to finish.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger, grace time.Duration, t Timeouts) error {
	for _, f := range []struct{ v, d *time.Duration }{
		{&t.ReadHeader, &DefaultTimeouts.ReadHeader}, {&t.Read, &DefaultTimeouts.Read},
		{&t.Write, &DefaultTimeouts.Write}, {&t.Idle, &DefaultTimeouts.Idle},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shut down http server: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http on %s: %w", ln.Addr(), err)
	}
	return nil
}
