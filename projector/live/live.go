// Package live is Canon's websocket server: it follows canon.versions and
// canon.rejected through the process's changelog feed, fans each version out
// to the subscribers of its (org, project, branch), encoded once, and serves
// GET /v1/projects/{org}/{project}/ws: every version after the one the
// client asks for, in order and without gaps (catch-up from the store, then
// live), the project's rejected mutations, and pushes on the same socket.
// docs/websocket.md is the protocol.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// Defaults of Config.
const (
	DefaultQueueSize       = 1024
	DefaultMaxMessageBytes = 4 << 20 // the producer's DefaultMaxBodyBytes
	DefaultPingInterval    = 25 * time.Second
	DefaultPongWait        = 60 * time.Second
	DefaultWriteTimeout    = 10 * time.Second
	DefaultStoreLagTimeout = 10 * time.Second
	DefaultResetGrace      = time.Second
	DefaultCatchUpPage     = 256
	DefaultClientID        = "canon-live"
)

// Pusher writes mutations pushed on a socket: the producer's *Producer is
// one. Pass a nil interface, not a nil *Producer, to refuse pushes.
type Pusher interface {
	Push(ctx context.Context, claims *auth.Claims, org, project string, req wire.PushRequest) ([]wire.Written, *wire.Error)
}

// Config configures a Server.
type Config struct {
	// Store is the instance's store, read for catch-up. It must hold the
	// followed partitions (a sequencer's or a read replica's): the server
	// waits for it to reach the changelog position of each subscription.
	Store *store.Store
	// Kafka holds the brokers, client id (default canon-live), logger and
	// metrics registerer of the changelog tail.
	Kafka  kafka.ClientConfig
	Topics kafka.TopicNames
	// PartitionCount is the partition count of canon.versions; default
	// (and it must equal) Store.Partitions().
	PartitionCount int32
	// Partitions are the partitions served; nil serves all. Subscriptions
	// to a project of another partition are closed with 4004.
	Partitions []int32
	// Changelog is the process's changelog feed, which the caller runs:
	// the server subscribes to it rather than fetching the changelog
	// again. It must start at or below the store's offsets of the served
	// partitions (FeedConfig.Start), so that no version committed before
	// the process started is missed. Nil: Run runs a feed of its own.
	Changelog *changelog.Feed
	// Serves, when set, tells which partitions the store holds now (see
	// readapi.Config.Serves): a subscription to a project of another
	// partition is refused with 4004, and one whose partition goes away
	// is closed with 4004, to reconnect where it is served.
	Serves func(p int32) bool
	// Keys verify tokens (a verify-only keyset is enough). Required.
	Keys *auth.Keyset
	// Pusher takes push messages; nil answers them with push_unavailable.
	Pusher Pusher
	// QueueSize bounds the messages waiting for one subscriber; a
	// subscriber whose queue overflows is closed with 4008. Default 1024.
	QueueSize int
	// MaxMessageBytes bounds a client message; larger ones close the
	// socket with 1009. Default 4 MiB, the HTTP push body limit.
	MaxMessageBytes int64
	// PingInterval is how often the server pings; a client that sends no
	// pong or message for PongWait is dropped. Defaults 25s and 60s.
	PingInterval time.Duration
	PongWait     time.Duration
	// WriteTimeout bounds one write to a socket; a client that cannot take
	// a message in that time is dropped without a close frame. Default 10s.
	WriteTimeout time.Duration
	// StoreLagTimeout bounds the wait for the store to reach a live
	// version's changelog position (it applies versions after Kafka
	// commits them); past it the socket is closed with 1011. Default 10s.
	StoreLagTimeout time.Duration
	// ResetGrace is how long a subscription from a version ahead of the
	// store's head waits for it before the server sends reset. Default 1s.
	ResetGrace time.Duration
	// CatchUpPage is the number of versions read from the store at once.
	// Default 256.
	CatchUpPage int
	// SendBufferBytes sets each socket's kernel send buffer; 0 leaves the
	// OS default. Smaller buffers hold less memory per connection and
	// detect slow clients sooner.
	SendBufferBytes int
	// CheckOrigin vets the Origin header of upgrades; nil accepts any
	// origin, which is safe because subscriptions authenticate with a
	// token, never with cookies.
	CheckOrigin func(*http.Request) bool
	// Limits bound decoded changelog records; default schemas.DefaultLimits().
	Limits schemas.Limits
	// Log receives the server's logs; nil discards them.
	Log *slog.Logger
	// Registerer gets the server's metrics; nil disables them.
	Registerer prometheus.Registerer
	// Now is the clock for tokens; nil is time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Topics == (kafka.TopicNames{}) {
		c.Topics = kafka.DefaultTopicNames()
	}
	if c.Kafka.ClientID == "" {
		c.Kafka.ClientID = DefaultClientID
	}
	if c.PartitionCount == 0 && c.Store != nil {
		c.PartitionCount = c.Store.Partitions()
	}
	if c.Partitions == nil {
		for p := range c.PartitionCount {
			c.Partitions = append(c.Partitions, p)
		}
	}
	setDefault(&c.QueueSize, DefaultQueueSize)
	setDefault(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	setDefault(&c.PingInterval, DefaultPingInterval)
	setDefault(&c.PongWait, DefaultPongWait)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.StoreLagTimeout, DefaultStoreLagTimeout)
	setDefault(&c.ResetGrace, DefaultResetGrace)
	setDefault(&c.CatchUpPage, DefaultCatchUpPage)
	if c.Limits == (schemas.Limits{}) {
		c.Limits = schemas.DefaultLimits()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("live: no store to catch subscribers up from"))
	} else if c.PartitionCount != c.Store.Partitions() {
		errs = append(errs, fmt.Errorf("live: canon.versions has %d partitions, the store %d: they must be equal", c.PartitionCount, c.Store.Partitions()))
	}
	if c.Keys == nil {
		errs = append(errs, errors.New("live: Keys is required: a keyset to verify tokens"))
	}
	for _, p := range c.Partitions {
		if p < 0 || p >= c.PartitionCount {
			errs = append(errs, fmt.Errorf("live: partition %d is not in [0, %d)", p, c.PartitionCount))
		}
	}
	if c.QueueSize < 1 || c.MaxMessageBytes < 1<<10 || c.CatchUpPage < 1 || c.SendBufferBytes < 0 {
		errs = append(errs, fmt.Errorf("live: limits must be positive (queue %d, message %d bytes, page %d, send buffer %d)",
			c.QueueSize, c.MaxMessageBytes, c.CatchUpPage, c.SendBufferBytes))
	}
	if c.PingInterval <= 0 || c.PongWait <= c.PingInterval || c.WriteTimeout <= 0 || c.StoreLagTimeout <= 0 || c.ResetGrace < 0 {
		errs = append(errs, fmt.Errorf("live: timeouts must be positive and the pong wait (%v) longer than the ping interval (%v)",
			c.PongWait, c.PingInterval))
	}
	return errors.Join(errs...)
}

// Server is the websocket server and its hub.
type Server struct {
	cfg   Config
	m     *metrics
	hub   *hub
	start map[int32]int64

	upgrader websocket.Upgrader
	feed     *changelog.Feed
	own      bool          // Run runs feed
	dead     chan struct{} // closed when the feed stops following the changelog
	stopErr  error         // why, set before dead is closed
	running  atomic.Bool
	done     chan struct{} // closed when Run ends: connections close with 1001

	mu     sync.Mutex
	cond   *sync.Cond
	closed bool
	active int // open connections
}

// New checks cfg, prepares the hub and subscribes it to the changelog
// feed, which starts at the store's position of each partition, so that
// no version committed before the process started is missed by a
// subscription.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Partitions = slices.Clone(cfg.Partitions)
	s := &Server{cfg: cfg, m: newMetrics(cfg.Registerer), done: make(chan struct{}), start: map[int32]int64{}}
	s.cond = sync.NewCond(&s.mu)
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: cfg.WriteTimeout,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  4 << 10,
		// Versions are written as frames beside the library, which skip
		// the write buffer: pool it rather than hold 4 KiB per idle
		// connection.
		WriteBufferPool: &sync.Pool{},
		CheckOrigin:     cfg.CheckOrigin,
	}
	if s.upgrader.CheckOrigin == nil {
		s.upgrader.CheckOrigin = func(*http.Request) bool { return true }
	}
	s.hub = newHub(cfg.Partitions, s.m, cfg.Log, cfg.Now)
	for _, p := range cfg.Partitions {
		off, ok, err := cfg.Store.Offset(p)
		if err != nil {
			return nil, fmt.Errorf("live: %w", err)
		}
		if !ok {
			off = 0
		}
		s.start[p] = off
		s.hub.next[p].Store(off)
	}
	s.feed, s.dead = cfg.Changelog, make(chan struct{})
	if s.feed == nil {
		feed, err := changelog.NewFeed(changelog.FeedConfig{Kafka: cfg.Kafka, Topics: cfg.Topics, PartitionCount: cfg.PartitionCount,
			Start: s.start, Limits: cfg.Limits, Log: cfg.Log})
		if err != nil {
			return nil, fmt.Errorf("live: %w", err)
		}
		s.feed, s.own = feed, true
	} else if s.feed.PartitionCount() != cfg.PartitionCount {
		return nil, fmt.Errorf("live: the changelog feed follows %d partitions, not %d", s.feed.PartitionCount(), cfg.PartitionCount)
	}
	versions := cfg.Topics.Versions
	s.feed.Subscribe(func(evs []changelog.Event, _ changelog.Positions) {
		for _, ev := range evs {
			s.hub.handle(ev, versions)
		}
	}, func(err error) {
		s.stopErr = err
		close(s.dead)
	})
	return s, nil
}

// Run runs the server's own changelog feed (without Config.Changelog) or
// waits for the shared one until ctx ends, then closes every subscription
// with 1001 and returns.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("live: Run called twice")
	}
	defer s.closeConns()
	if s.own {
		err := s.feed.Run(ctx)
		if err != nil {
			return fmt.Errorf("live: %w", err)
		}
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case <-s.dead:
		return fmt.Errorf("live: %w", s.stopErr)
	}
}

// closeConns tells every connection to close with 1001 and waits for
// them: each ends within a write timeout and a close handshake.
func (s *Server) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.done)
	for s.active > 0 {
		s.cond.Wait()
	}
}

// enter counts a new connection; false once the server is stopping.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 {
		s.cond.Broadcast()
	}
}

// Mount adds the websocket endpoint to mux.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/projects/{org}/{project}/ws", s.handleWS)
}

// Ready reports whether the changelog feed runs and Kafka answers.
func (s *Server) Ready(ctx context.Context) error {
	select {
	case <-s.done:
		return errors.New("live: stopped")
	default:
	}
	if err := s.feed.Ready(ctx); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	return nil
}
