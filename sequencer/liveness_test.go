package sequencer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/kafka"
)

func testLiveness(t *testing.T) *liveness {
	t.Helper()
	s := &Sequencer{cfg: Config{Kafka: kafka.ClientConfig{Brokers: []string{"127.0.0.1:9092"}}, SessionTimeout: time.Second},
		log: slog.New(slog.DiscardHandler), m: newMetrics(nil)}
	l, err := newLiveness(s, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	go l.serve()
	t.Cleanup(l.goodbye)
	return l
}

func dialLiveness(t *testing.T, l *liveness) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// The server tracks the connection once it accepted it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		n := len(l.conns)
		l.mu.Unlock()
		if n > 0 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener did not accept the connection")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLivenessGoodbye: a deliberate stop writes the goodbye, which a
// watcher reads as no death; afterwards the address refuses connections.
func TestLivenessGoodbye(t *testing.T) {
	l := testLiveness(t)
	c := dialLiveness(t, l)
	l.goodbye()
	if got := l.hold(context.Background(), c); got != heldGoodbye {
		t.Fatalf("hold after goodbye = %v, want heldGoodbye", got)
	}
	_, err := net.DialTimeout("tcp", l.addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after goodbye: %v, want connection refused", err)
	}
}

// TestLivenessDrop: a listener that goes away without a goodbye (what a
// killed process's kernel does to its sockets) is a drop, and the dial
// that confirms it is refused.
func TestLivenessDrop(t *testing.T) {
	l := testLiveness(t)
	c := dialLiveness(t, l)
	l.mu.Lock()
	l.bye = true // as if killed: no goodbye written
	_ = l.ln.Close()
	for sc := range l.conns {
		_ = sc.Close()
	}
	l.mu.Unlock()
	if got := l.hold(context.Background(), c); got != heldDropped {
		t.Fatalf("hold after a close without goodbye = %v, want heldDropped", got)
	}
	_, err := net.DialTimeout("tcp", l.addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after the close: %v, want connection refused", err)
	}
}

// TestLivenessAcceptsNothing: the listener writes nothing to a new
// connection, and closes one that sends anything.
func TestLivenessAcceptsNothing(t *testing.T) {
	l := testLiveness(t)
	c := dialLiveness(t, l)
	if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	// Closed with the unread bytes: a reset, or an end of file.
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) || len(b) != 0 {
		t.Fatalf("read after sending bytes: %q, %v; want nothing and the connection closed", b, err)
	}
}

// TestLivenessHoldEnds: ending the watch ends the hold, as no death.
func TestLivenessHoldEnds(t *testing.T) {
	l := testLiveness(t)
	c := dialLiveness(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if got := l.hold(ctx, c); got != heldEnded {
		t.Fatalf("hold after the watch ended = %v, want heldEnded", got)
	}
}

// TestLivenessStrange: an address that answers something other than
// the goodbye is not a Canon liveness listener; it is not watched.
func TestLivenessStrange(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n")
			_ = c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	l := &liveness{}
	if got := l.hold(context.Background(), c); got != heldStrange {
		t.Fatalf("hold of another protocol = %v, want heldStrange", got)
	}
}

func TestAdvertisedAddr(t *testing.T) {
	unspec := &net.TCPAddr{IP: net.IPv4zero, Port: 4321}
	for _, c := range []struct {
		bound     *net.TCPAddr
		advertise string
		want      string
	}{
		{unspec, "seq-1.internal:7000", "seq-1.internal:7000"},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 7000}, "", "10.1.2.3:7000"},
		{unspec, "", "127.0.0.1:4321"}, // the route to the broker below
	} {
		got, err := advertisedAddr(c.bound, c.advertise, []string{"127.0.0.1:9092"})
		if err != nil || got != c.want {
			t.Errorf("advertisedAddr(%v, %q) = %q, %v; want %q", c.bound, c.advertise, got, err, c.want)
		}
	}
	if _, err := advertisedAddr(unspec, "no-port", nil); err == nil {
		t.Error("an advertised address without a port was accepted")
	}
}
