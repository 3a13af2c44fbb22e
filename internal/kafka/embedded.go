package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultEmbeddedListen is where `canon dev` runs its embedded broker.
const DefaultEmbeddedListen = "127.0.0.1:9092"

// EmbeddedConfig configures the embedded broker.
type EmbeddedConfig struct {
	// DataDir keeps the broker's logs, offsets and groups across restarts.
	// Required.
	DataDir string
	// Listen is host:port to serve the Kafka protocol on; default
	// DefaultEmbeddedListen. Port 0 picks a free port.
	Listen string
	// AnyPortIfBusy listens on a free port of Listen's host when Listen's
	// port is taken (a Kafka of the machine's own on 9092), instead of
	// failing; Busy reports it. Clients find the broker by the address
	// Brokers returns, and the data dir does not depend on the port.
	AnyPortIfBusy bool
	// MaxMessageBytes is the broker's message.max.bytes; default
	// DefaultMaxMessageBytes.
	MaxMessageBytes int32
	// Log receives the broker's warnings and errors; nil discards them.
	Log *slog.Logger
}

// Embedded is an in-process Kafka-protocol broker (franz-go's kfake) with
// its state persisted under a data directory. It implements the parts of
// Kafka that Canon uses (transactions, consumer groups, read_committed) for
// `canon dev` and fast unit tests; claims about Kafka itself are tested on
// a real broker.
type Embedded struct {
	cluster *kfake.Cluster
	addr    string
	busy    string
}

// StartEmbedded starts the broker, reloading the state in cfg.DataDir.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("embedded broker: no data dir: pass --data DIR")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultEmbeddedListen
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return nil, fmt.Errorf("embedded broker listen address %q: %w", cfg.Listen, err)
	}
	dir := filepath.Join(cfg.DataDir, "kafka")
	// The broker's logs hold every mutation and item body: the owner's
	// only.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	// Bind before handing the listener to kfake so that a busy port gives
	// an error that says what to do.
	ln, err := net.Listen("tcp", cfg.Listen)
	busy := ""
	if err != nil && cfg.AnyPortIfBusy && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(cfg.Listen)
		busy = cfg.Listen
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, fmt.Errorf("embedded broker cannot listen on %s (%w): stop what uses it, pass --kafka-port or --kafka-listen with "+
			"another port, or pass --brokers to use a running Kafka instead", cfg.Listen, err)
	}
	addr := ln.Addr().String()
	used := false
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.DataDir(dir),
		kfake.ClusterID("canon-dev"),
		kfake.DefaultNumPartitions(DefaultPartitions),
		kfake.GroupMinSessionTimeout(time.Second), // lets tests use short sessions
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(int(cfg.MaxMessageBytes))}),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			if !used {
				used = true
				return ln, nil
			}
			return net.Listen(network, addr)
		}),
	}
	if cfg.Log != nil {
		opts = append(opts, kfake.WithLogger(slogLogger{cfg.Log.With("component", "kfake")}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start embedded broker in %s: %w", dir, err)
	}
	return &Embedded{cluster: c, addr: addr, busy: busy}, nil
}

// Brokers returns the address clients dial.
func (e *Embedded) Brokers() []string { return []string{e.addr} }

// Busy returns the address asked for when it was taken and the broker
// listens on a free port instead (AnyPortIfBusy); "" otherwise.
func (e *Embedded) Busy() string { return e.busy }

// Close stops the broker and flushes its state to the data dir.
func (e *Embedded) Close() { e.cluster.Close() }

// slogLogger adapts slog to kfake's logger, keeping warnings and errors.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		s.l.Error(fmt.Sprintf(msg, args...))
	case kfake.LogLevelWarn:
		s.l.Warn(fmt.Sprintf(msg, args...))
	}
}
