package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/internal/ops"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/projector/history"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

// roles are the components `canon serve --roles` can run, with their help;
// `canon dev` runs all of them. assemble builds them.
var roles = map[string]string{
	"producer":  "HTTP push endpoints (Canon's and Replicache's) into canon.mutations",
	"sequencer": "decides mutations and publishes versions",
	"readapi":   "HTTP reads, Replicache pull, the websocket and the web UI (/ui/); without the sequencer role, a read replica of --partitions",
	"projector": "projects canon.versions into the ClickHouse history tables (needs --clickhouse)",
}

func knownRoles() string {
	names := make([]string, 0, len(roles))
	for name, help := range roles {
		names = append(names, name+" ("+help+")")
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// allRoles are the names of every role, sorted.
func allRoles() []string { return slices.Sorted(maps.Keys(roles)) }

// component is one long-running part of a node.
type component struct {
	name string
	run  func(context.Context) error
}

// assembly is what assemble built for a node's roles.
type assembly struct {
	components []component
	// store is the Pebble store the roles share (Pebble allows one opener
	// per directory); nil when no role keeps state.
	store *store.Store
	// closers close what the roles opened beside the store (the
	// checkpoint bucket), before the store.
	closers []func() error
}

// close closes what the components leave open once they all returned:
// the checkpoint bucket, then the store.
func (a *assembly) close(n *node) {
	for _, c := range a.closers {
		if err := c(); err != nil {
			n.log.Error("close", "err", err)
		}
	}
	a.closers = nil
	if a.store != nil {
		if err := a.store.Close(); err != nil {
			n.log.Error("close the store", "err", err)
		}
		a.store = nil
	}
}

// assemble builds the components of the named roles, each handed what it
// depends on, in this order:
//
//  1. the store under the data dir, for the sequencer and the read API;
//  2. the sequencer, which writes the store;
//  3. the read side's source: with the sequencer, the partitions it owns
//     and has restored; without, a read replica of --partitions;
//  4. the producer, whose ?wait=applied waits for the read side;
//  5. the read API, the web UI and the websocket, which pushes through
//     the producer (one of its own when the node runs none);
//  6. the history projector, which depends on nothing of the node.
//
// Endpoints are mounted on n's mux and readiness checks added to n's; the
// components run with run. Nothing runs or connects before that, but the
// store is open: on error it is closed again.
func (n *node) assemble(names []string) (_ *assembly, err error) {
	has := func(role string) bool { return slices.Contains(names, role) }
	a := &assembly{}
	// What New made that holds resources before Run: the producers'
	// Kafka clients, closed when a later role cannot be built.
	var undo []func()
	defer func() {
		if err != nil {
			for _, f := range undo {
				f()
			}
			a.close(n)
		}
	}()
	add := func(name string, run func(context.Context) error) {
		a.components = append(a.components, component{name, run})
	}

	// The roles that verify tokens need a keyset.
	for _, role := range []string{"producer", "readapi"} {
		if has(role) && n.keys == nil {
			return nil, usageError{fmt.Errorf("role %s: the %s role verifies tokens: pass --keys FILE (a keyset made with 'canon token keygen')", role, role)}
		}
	}
	// 1. The store.
	var ckpts *checkpoint.Bucket
	if has("sequencer") || has("readapi") {
		if a.store, err = n.openStore(); err != nil {
			return nil, err
		}
		if ckpts, err = n.openCheckpoints(context.Background(), a.store); err != nil {
			return nil, err
		}
		if ckpts != nil {
			a.closers = append(a.closers, ckpts.Close)
		}
	}
	// The restores' checkpoints: a nil *Bucket must not become a non-nil
	// interface.
	var restoreFrom changelog.Checkpoints
	if ckpts != nil {
		restoreFrom = ckpts
	}
	// With the producer and the sequencer in one process, the producer
	// tells the sequencer what it is writing to canon.mutations, so that
	// transactions wait for those records and only for those.
	var inflight *kafka.Inflight
	if has("producer") && has("sequencer") {
		inflight = kafka.NewInflight(n.topics.Partitions)
	}
	// The changelog feed: the one reader of canon.versions that the
	// producer's ?wait=applied and the websocket share, fed by the
	// sequencer for the partitions it serves.
	var (
		seq  *sequencer.Sequencer
		rep  *readapi.Replica
		feed *changelog.Feed
	)
	if has("producer") || has("readapi") {
		var start map[int32]int64
		if has("readapi") {
			// The websocket's hub starts at the store's offsets of what
			// it serves (all partitions with the sequencer).
			served := n.partitions
			if has("sequencer") {
				served = nil
			}
			if start, err = storeOffsets(a.store, served); err != nil {
				return nil, err
			}
		}
		kcfg := n.kcfg
		kcfg.ClientID = "canon-changelog"
		if feed, err = changelog.NewFeed(changelog.FeedConfig{Kafka: kcfg, Topics: n.topics.Names, PartitionCount: n.topics.Partitions,
			Start: start, Local: func(p int32) bool {
				switch {
				case seq != nil:
					return seq.Serves(p)
				case rep != nil:
					return rep.Publishes(p)
				}
				return false
			}, Log: n.log}); err != nil {
			return nil, err
		}
		n.ready.Add("changelog", feed.Ready)
		add("changelog", feed.Run)
	}
	// 2. The sequencer.
	if has("sequencer") {
		var committed func(int32, int64, []changelog.Event, int64)
		if feed != nil {
			committed = feed.PublishCommitted
		}
		if seq, err = n.newSequencer(a.store, restoreFrom, inflight, committed); err != nil {
			return nil, fmt.Errorf("role sequencer: %w", err)
		}
		if ckpts != nil {
			r, err := n.checkpointRunner(ckpts, seq.Owned, seq.Generation)
			if err != nil {
				return nil, usageError{err}
			}
			add("checkpoints", r.Run)
		}
		n.ready.Add("sequencer", seq.Ready)
		n.ready.AddLags("sequencer", func() []ops.PartitionLag {
			var out []ops.PartitionLag
			for _, l := range seq.Lags() {
				out = append(out, ops.PartitionLag{Role: l.Role, Partition: l.Partition, Records: l.Records})
			}
			return out
		})
		add("sequencer", func(ctx context.Context) error {
			err := seq.Run(ctx)
			if errors.Is(err, sequencer.ErrDuplicateInstance) {
				// The instance id is the data dir's, or --instance-id.
				msg := strings.Replace(err.Error(), "its own InstanceID", "its own --data directory or --instance-id", 1)
				return explainedError{msg, err}
			}
			return err
		})
	}
	// 3. What the read API serves: reads returns whether it serves a
	// partition; nil when the node serves no reads.
	var (
		reads      func(int32) bool
		partitions = n.partitions
		serves     func(int32) bool
	)
	if has("readapi") {
		if seq != nil {
			// The sequencer's store holds the partitions the sequencer
			// owns and has restored; the others are answered 421 (4004 on
			// the websocket). --partitions is for replicas.
			partitions, serves, reads = nil, seq.Serves, seq.Serves
		} else {
			if rep, err = n.newReplica(a.store, partitions, restoreFrom, feed); err != nil {
				return nil, fmt.Errorf("role readapi: %w", err)
			}
			n.ready.Add("readapi-replica", rep.Ready)
			n.ready.AddLags("readapi-replica", func() []ops.PartitionLag {
				lags := rep.Lags()
				out := make([]ops.PartitionLag, 0, len(lags))
				for _, p := range slices.Sorted(maps.Keys(lags)) {
					out = append(out, ops.PartitionLag{Role: "replica", Partition: p, Records: lags[p]})
				}
				return out
			})
			add("readapi-replica", rep.Run)
			reads = func(p int32) bool { return partitions == nil || slices.Contains(partitions, p) }
		}
	}
	// 4. The producer. ?wait=applied answers once the node's read API
	// serves the outcome, so that a read here right after sees the write;
	// a partition the node serves no reads of (no readapi role, another
	// sequencer instance owns it, a replica of other partitions) is
	// answered 421 here, never stale: nothing to wait for.
	var prod *producer.Producer
	if has("producer") {
		st := a.store
		readable := func(ctx context.Context, p int32, next int64) error {
			if reads == nil || !reads(p) {
				return nil
			}
			return st.WaitApplied(ctx, p, next)
		}
		if prod, err = n.newProducer("canon-producer", readable, inflight, feed); err != nil {
			return nil, fmt.Errorf("role producer: %w", err)
		}
		undo = append(undo, prod.Close)
		prod.Mount(n.mux)
		n.ready.Add("producer", prod.Ready)
		add("producer", prod.Run)
	}
	// 5. The read API, the web UI and the websocket.
	if has("readapi") {
		pusher := prod
		if pusher == nil {
			// Pushes on the socket through a producer of the websocket's
			// own, which no HTTP route serves.
			if pusher, err = n.newProducer("canon-live-producer", nil, nil, feed); err != nil {
				return nil, fmt.Errorf("role readapi: %w", err)
			}
			undo = append(undo, pusher.Close)
			n.ready.Add("live-producer", pusher.Ready)
			add("live-producer", pusher.Run)
		}
		ws, err := n.mountReads(a.store, partitions, serves, pusher, feed)
		if err != nil {
			return nil, fmt.Errorf("role readapi: %w", err)
		}
		n.ready.Add("live", ws.Ready)
		add("live", ws.Run)
	}
	// 6. The history projector.
	if has("projector") {
		p, err := n.newProjector()
		if err != nil {
			return nil, fmt.Errorf("role projector: %w", err)
		}
		if p != nil {
			n.ready.Add("projector", p.Ready)
			add("projector", p.Run)
		}
	}
	return a, nil
}

// runRoles builds the components of the named roles (assemble) and runs
// them, with the HTTP server and the keyset reload, until ctx ends, the
// process gets SIGINT or SIGTERM, or one of them fails; extra runs beside
// them (canon dev's banner). It returns once every one returned, with the
// store closed.
func (n *node) runRoles(ctx context.Context, names []string, extra ...component) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := n.assemble(names)
	if err != nil {
		return err
	}
	defer a.close(n)
	return n.run(ctx, append(a.components, extra...))
}

// openStore opens the store under the node's data dir.
func (n *node) openStore() (*store.Store, error) {
	dir := filepath.Join(n.dataDir, "store")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w (pass --data with a writable directory)", dir, err)
	}
	st, err := store.Open(store.Config{Dir: dir, Partitions: n.topics.Partitions, Logger: n.log, NoSync: n.storeNoSync})
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	return st, nil
}

// newSequencer is the sequencer role's sequencer, on st.
func (n *node) newSequencer(st *store.Store, ckpts changelog.Checkpoints, inflight *kafka.Inflight, committed func(int32, int64, []changelog.Event, int64)) (*sequencer.Sequencer, error) {
	kcfg := n.kcfg
	kcfg.ClientID = "canon-sequencer"
	// The instance id lives with the store: a restart on the same data
	// is the same instance, and fences its predecessor at once.
	instance := n.seq.instanceID
	if instance == "" {
		var err error
		if instance, err = sequencer.LoadInstanceID(n.dataDir); err != nil {
			return nil, err
		}
	}
	liveness := n.seq.liveness
	switch liveness {
	case "off":
		liveness = ""
	case "":
		// The interface the HTTP server listens on (the others reach
		// this instance there already), any free port.
		host, _, err := net.SplitHostPort(n.httpLn.Addr().String())
		if err != nil {
			return nil, err
		}
		liveness = net.JoinHostPort(host, "0")
	}
	return sequencer.New(sequencer.Config{
		Kafka:  kcfg,
		Topics: n.topics.Names,
		// Deployments that share a cluster through --topic-prefix must
		// not share a group: one's rebalances would stall the other's.
		Group:                n.topicPrefix + sequencer.DefaultGroup,
		InstanceID:           instance,
		Store:                st,
		Checkpoints:          ckpts,
		Standbys:             n.seq.standbys,
		Liveness:             liveness,
		LivenessAdvertise:    n.seq.livenessAdvertise,
		KeepPartitionsOnStop: n.seq.keepOnStop,
		Registry:             n.mutators,
		Bundles:              n.bundles,
		SessionTimeout:       n.seq.sessionTimeout,
		TransactionTimeout:   n.seq.txnTimeout,
		GatherWait:           n.seq.gatherWait,
		GatherFresh:          n.seq.gatherFresh,
		Committed:            committed,
		Inflight:             inflight,
		PushWait:             n.seq.pushWait,
		Linger:               n.seq.linger,
		Log:                  n.log,
		Registerer:           n.registry,
	})
}

// newProducer is a producer that follows the changelog (?wait=applied and
// the 409 for a client group owned by another principal); readable is
// its Config.Readable.
func (n *node) newProducer(clientID string, readable func(context.Context, int32, int64) error, inflight *kafka.Inflight, feed *changelog.Feed) (*producer.Producer, error) {
	kcfg := n.kcfg
	kcfg.ClientID = clientID
	return producer.New(producer.Config{
		Kafka:          kcfg,
		Topics:         n.topics.Names,
		Keys:           n.verifyKeys(),
		Log:            n.log,
		Registerer:     n.registry,
		Partitions:     n.topics.Partitions,
		Changelog:      feed,
		SequencerGroup: n.topicPrefix + sequencer.DefaultGroup,
		Readable:       readable,
		CheckBundle:    checkBundle(n.bundleOpts),
		Inflight:       inflight,
		Linger:         n.producerLinger,
		ProduceDirect:  n.producerDirect,
		RoundGather:    n.producerGather,
	})
}

// newReplica is the read replica of a readapi role without a sequencer:
// it materializes st for partitions (all when nil) from canon.versions
// and is ready once caught up.
func (n *node) newReplica(st *store.Store, partitions []int32, ckpts changelog.Checkpoints, feed *changelog.Feed) (*readapi.Replica, error) {
	kcfg := n.kcfg
	kcfg.ClientID = "canon-readapi-replica"
	return readapi.NewReplica(readapi.ReplicaConfig{
		Kafka: kcfg, Topics: n.topics.Names, Store: st, Partitions: partitions, Rejections: true, Log: n.log,
		Checkpoints: ckpts, Changelog: feed,
	})
}

// newProjector is the projector role's history projector; nil, when canon
// dev has no ClickHouse, for a role that then runs nothing.
func (n *node) newProjector() (*history.Projector, error) {
	f := activeClickHouse.Load()
	if f == nil {
		return nil, fmt.Errorf("the projector role needs the ClickHouse flags of serve or dev")
	}
	if len(f.addr) == 0 {
		if f.optional {
			fmt.Fprintf(f.out, "  history     %s\n", f.historyLine())
			return nil, nil
		}
		return nil, usageError{fmt.Errorf("the projector role writes to ClickHouse: pass --clickhouse host:port (native protocol) or set CANON_CLICKHOUSE")}
	}
	kcfg := n.kcfg
	kcfg.ClientID = "canon-projector"
	chcfg, err := f.config()
	if err != nil {
		return nil, err
	}
	p, err := history.New(history.Config{
		Kafka:          kcfg,
		Topics:         n.topics.Names,
		Group:          n.topicPrefix + history.DefaultGroup,
		ClickHouse:     chcfg,
		BatchRows:      f.batchRows,
		BatchBytes:     f.batchBytes,
		BatchInterval:  f.batchInterval,
		SessionTimeout: f.sessionTimeout,
		Log:            n.log,
		Registerer:     n.registry,
	})
	if err != nil {
		return nil, usageError{err}
	}
	if f.optional {
		fmt.Fprintf(f.out, "  history     %s\n", f.historyLine())
	}
	return p, nil
}

// storeOffsets are st's changelog offsets of partitions (all when nil),
// 0 for those it holds nothing of: where a reader of the changelog must
// start to miss nothing the store lacks.
func storeOffsets(st *store.Store, partitions []int32) (map[int32]int64, error) {
	if partitions == nil {
		for p := range st.Partitions() {
			partitions = append(partitions, p)
		}
	}
	start := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		off, ok, err := st.Offset(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			off = 0
		}
		start[p] = off
	}
	return start, nil
}
