package main

import (
	"context"
	"errors"

	"github.com/canon-sync/canon/readapi"
)

func init() {
	roles["readapi"] = role{
		help:  "HTTP reads and Replicache pull; without the sequencer role, a read replica of --partitions",
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
	run := func(ctx context.Context) error {
		<-ctx.Done()
		return nil
	}
	if n.runs("sequencer") {
		// The sequencer's store holds the partitions the sequencer owns;
		// --partitions is for replicas.
		partitions = nil
	} else {
		kcfg := n.kcfg
		kcfg.ClientID = "canon-readapi-replica"
		rep, err := readapi.NewReplica(readapi.ReplicaConfig{
			Kafka: kcfg, Topics: n.topics.Names, Store: st, Partitions: partitions, Log: n.log,
		})
		if err != nil {
			return nil, err
		}
		n.ready.Add("readapi-replica", rep.Ready)
		run = rep.Run
	}
	srv, err := readapi.New(readapi.Config{
		Store:      st,
		Keys:       n.keys.VerifyOnly(),
		Partitions: partitions,
		Log:        n.log,
		Registerer: n.registry,
	})
	if err != nil {
		return nil, err
	}
	srv.Mount(n.mux)
	// The live projector's websocket, GET /v1/projects/{org}/{project}/ws
	// (package projector/live), is mounted here on the same mux, next to
	// the reads it complements: live.Mount(n.mux).
	return run, nil
}
