package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// lockedBuffer is a log destination for concurrent checks.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// /readyz answers anyone: it names the check that is not ready, and the
// request id under which the log has why, but not the error, which names
// brokers.
func TestReadyzHidesErrors(t *testing.T) {
	var logged lockedBuffer
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
