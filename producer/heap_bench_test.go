package producer

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
)

// firstRead calls reading once, on the first Read of a request body: the
// handler is then waiting for the body's bytes.
type firstRead struct {
	io.ReadCloser
	once    atomic.Bool
	reading func()
}

func (f *firstRead) Read(p []byte) (int, error) {
	if f.once.CompareAndSwap(false, true) {
		f.reading()
	}
	return f.ReadCloser.Read(p)
}

// BenchmarkSilentPushes reports the heap that 30 pushes hold which
// announce a 4 MiB body (the limit) and then send nothing, once every
// handler waits for its body: what a write token can pin without sending
// anything.
func BenchmarkSilentPushes(b *testing.B) {
	const conns = 30
	keys := auth.NewKeyset()
	if err := keys.Generate("k1"); err != nil {
		b.Fatal(err)
	}
	// No Kafka: nothing is produced, the bodies never come.
	p, err := New(Config{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:1"}}, Keys: keys.VerifyOnly()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	mux := http.NewServeMux()
	p.Mount(mux)
	var waiting atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &firstRead{ReadCloser: r.Body, reading: func() { waiting.Add(1) }}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := auth.Claims{Org: "acme", Projects: []string{"*"}, Scopes: []string{auth.ScopeWrite}}
	c.Subject = "user:alice"
	tok, err := keys.Issue(c, time.Hour, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	head := fmt.Sprintf("POST /v1/projects/acme/roadmap/push HTTP/1.1\r\nHost: canon\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", tok, DefaultMaxBodyBytes)
	var held float64
	for b.Loop() {
		b.StopTimer()
		waiting.Store(0)
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		open := make([]net.Conn, conns)
		for i := range open {
			if open[i], err = net.Dial("tcp", srv.Listener.Addr().String()); err != nil {
				b.Fatal(err)
			}
			if _, err := io.WriteString(open[i], head); err != nil {
				b.Fatal(err)
			}
		}
		for waiting.Load() < conns {
			runtime.Gosched() // until every handler waits for its body
		}
		b.StopTimer()
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		held = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		for _, conn := range open {
			_ = conn.Close()
		}
		b.StartTimer()
	}
	b.ReportMetric(held/(1<<20), "heap-MiB/30-silent-pushes")
}
