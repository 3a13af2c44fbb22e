package main

import (
	"context"
	"errors"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/projector/live"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/webui"
)

func init() {
	roles["readapi"] = role{
		help:  "HTTP reads, Replicache pull, the websocket and the web UI (/ui/); without the sequencer role, a read replica of --partitions",
		setup: setupReadAPI,
	}
}

// setupReadAPI serves the read API from the node's store. With the
// sequencer role in the same node (canon dev) that is the sequencer's
// store, and nothing else runs; otherwise the node is a read replica: it
// materializes the store for --partitions (all by default) from
// canon.versions and is ready once caught up.
func setupReadAPI(n *node) (func(context.Context) error, error) {
	if n.keys == nil {
		return nil, usageError{errors.New("the readapi role verifies tokens: pass --keys FILE (a keyset made with 'canon token keygen')")}
	}
	st, err := n.sharedStore()
	if err != nil {
		return nil, err
	}
	partitions := n.partitions
	var serves func(int32) bool
	run := func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}
	if n.runs("sequencer") {
		// The sequencer's store holds the partitions the sequencer owns
		// and has restored; the others are answered 421 (4004 on the
		// websocket). --partitions is for replicas.
		partitions, serves = nil, n.sequencer.Serves
	} else {
		kcfg := n.kcfg
		kcfg.ClientID = "canon-readapi-replica"
		rep, err := readapi.NewReplica(readapi.ReplicaConfig{
			Kafka: kcfg, Topics: n.topics.Names, Store: st, Partitions: partitions, Rejections: true, Log: n.log,
		})
		if err != nil {
			return nil, err
		}
		n.ready.Add("readapi-replica", rep.Ready)
		run = rep.Run
	}
	n.reads = serves
	if serves == nil {
		n.reads = func(p int32) bool { return partitions == nil || slices.Contains(partitions, p) }
	}
	srv, err := readapi.New(readapi.Config{
		Store:      st,
		Keys:       n.verifyKeys(),
		Partitions: partitions,
		Serves:     serves,
		Log:        n.log,
		Registerer: n.registry,
	})
	if err != nil {
		return nil, err
	}
	srv.Mount(n.mux)
	// The web UI: static assets that use the API above, at /ui/ (and /
	// redirects there).
	ui, err := webui.New()
	if err != nil {
		return nil, err
	}
	ui.Mount(n.mux)

	// The websocket: versions of a project live, and pushes on the socket
	// through the node's producer (or one of its own).
	pusher := n.producer
	if pusher == nil {
		kcfg := n.kcfg
		kcfg.ClientID = "canon-live-producer"
		if pusher, err = producer.New(producer.Config{Kafka: kcfg, Topics: n.topics.Names, Keys: n.verifyKeys(), Log: n.log,
			Registerer: n.registry, Partitions: n.topics.Partitions, SequencerGroup: n.topicPrefix + sequencer.DefaultGroup}); err != nil {
			return nil, err
		}
	}
	kcfg := n.kcfg
	kcfg.ClientID = "canon-live"
	// Upgrades get the origin check of the HTTP APIs (--cors-origins).
	cors := n.cors
	if cors == nil {
		cors, _ = httpapi.NewCORS(nil) // the server's own origin only
	}
	ws, err := live.New(live.Config{Store: st, Kafka: kcfg, Topics: n.topics.Names, PartitionCount: n.topics.Partitions,
		Partitions: partitions, Serves: serves, Keys: n.verifyKeys(), Pusher: pusher, Log: n.log, Registerer: n.registry,
		CheckOrigin: cors.CheckOrigin})
	if err != nil {
		return nil, err
	}
	ws.Mount(n.mux)
	n.ready.Add("live", ws.Ready)
	own := pusher != n.producer
	return func(ctx context.Context) error {
		if own {
			defer pusher.Close()
		}
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return run(gctx) })
		g.Go(func() error { return ws.Run(gctx) })
		return g.Wait()
	}, nil
}
