package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/canon-sync/canon/sequencer"
	"github.com/canon-sync/canon/store"
)

func init() {
	roles["sequencer"] = role{help: "decides mutations and publishes versions", setup: setupSequencer}
}

// openStore opens the Pebble store under the node's data dir.
func openStore(n *node) (*store.Store, error) {
	dir := filepath.Join(n.dataDir, "store")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w (pass --data with a writable directory)", dir, err)
	}
	st, err := store.Open(store.Config{Dir: dir, Partitions: n.topics.Partitions, Logger: n.log})
	if err != nil {
		return nil, fmt.Errorf("open store in %s: %w", dir, err)
	}
	return st, nil
}

func setupSequencer(n *node) (func(context.Context) error, error) {
	st, err := openStore(n)
	if err != nil {
		return nil, err
	}
	kcfg := n.kcfg
	kcfg.ClientID = "canon-sequencer"
	seq, err := sequencer.New(sequencer.Config{
		Kafka:      kcfg,
		Topics:     n.topics.Names,
		Store:      st,
		Log:        n.log,
		Registerer: n.registry,
	})
	if err != nil {
		st.Close()
		return nil, err
	}
	n.ready.Add("sequencer", seq.Ready)
	return func(ctx context.Context) error {
		defer st.Close()
		return seq.Run(ctx)
	}, nil
}
