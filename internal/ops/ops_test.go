package ops

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/canon-sync/canon/internal/testenv"
)

// /readyz answers anyone: it names the check that is not ready, and the
// request id under which the log has why, but not the error, which names
// brokers.
func TestReadyzHidesErrors(t *testing.T) {
	var logged testenv.LogBuffer
	ready := NewReadiness()
	ready.Add("kafka", func(context.Context) error {
		return errors.New("brokers [10.0.0.7:9092] do not answer: dial tcp 10.0.0.7:9092: connection refused")
	})
	ready.Add("store", func(context.Context) error { return nil })
	mux := http.NewServeMux()
	Mount(mux, ready, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&logged, nil)))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var resp readyResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusServiceUnavailable || resp.Ready || len(resp.Failed) != 1 || resp.Failed["kafka"] == "" || resp.RequestID == "" {
		t.Fatalf("%d %s: want 503 naming the kafka check with a request id", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "10.0.0.7") {
		t.Errorf("/readyz shows a broker address: %s", rec.Body)
	}
	if log := logged.String(); !strings.Contains(log, resp.RequestID) || !strings.Contains(log, "10.0.0.7:9092") || !strings.Contains(log, `"check":"kafka"`) {
		t.Errorf("the log does not have the failure under the request id: %s", log)
	}

	ready.Add("kafka", func(context.Context) error { return nil })
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"ready":true}` {
		t.Errorf("ready: %d %s", rec.Code, rec.Body)
	}
}

// /readyz lists the per-partition lags of the components that hold
// copies of the changelog, ready or not.
func TestReadyzLags(t *testing.T) {
	ready := NewReadiness()
	restoring := true
	ready.Add("sequencer", func(context.Context) error {
		if restoring {
			return errors.New("restoring partitions 1 (1200 records left)")
		}
		return nil
	})
	ready.AddLags("sequencer", func() []PartitionLag {
		lag := int64(0)
		if restoring {
			lag = 1200
		}
		return []PartitionLag{{Role: "owner", Partition: 1, Records: lag}, {Role: "standby", Partition: 2, Records: 7}}
	})
	mux := http.NewServeMux()
	Mount(mux, ready, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	for _, want := range []struct {
		code int
		body string
	}{
		{http.StatusServiceUnavailable, `"lags":{"sequencer":[{"role":"owner","partition":1,"records":1200},{"role":"standby","partition":2,"records":7}]}`},
		{http.StatusOK, `{"ready":true,"lags":{"sequencer":[{"role":"owner","partition":1,"records":0},{"role":"standby","partition":2,"records":7}]}}`},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != want.code || !strings.Contains(rec.Body.String(), want.body) {
			t.Errorf("%d %s: want %d with %s", rec.Code, rec.Body, want.code, want.body)
		}
		restoring = false
	}
}

// serve runs Serve with t on a free port until the test ends.
func serve(tb testing.TB, h http.Handler, t Timeouts) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, slog.New(slog.DiscardHandler), time.Second, t) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
	return ln.Addr().String()
}

// closed waits until the server closes conn: a read returns EOF (or a
// reset). The deadline only keeps a failing test from hanging.
func closed(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open", what)
	}
}

// The server ends what a client holds without using it: a keep-alive
// connection idle after its request, and a request whose announced body
// never comes (which would otherwise pin the handler and its buffers).
func TestServeTimeouts(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}), Timeouts{Read: 200 * time.Millisecond, Idle: 200 * time.Millisecond})

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if _, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: canon\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	closed(t, idle, "idle keep-alive connection")

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if _, err := io.WriteString(silent, "POST / HTTP/1.1\r\nHost: canon\r\nContent-Type: application/json\r\nContent-Length: 4194304\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	closed(t, silent, "request with a silent body")
}
