package main

import (
	"context"
	"errors"

	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/sequencer"
)

func init() {
	roles["sequencer"] = role{help: "decides mutations and publishes versions", setup: setupSequencer}
	roles["producer"] = role{help: "HTTP push endpoints (Canon's and Replicache's) into canon.mutations", setup: setupProducer}
}

func setupProducer(n *node) (func(context.Context) error, error) {
	if n.keys == nil {
		return nil, usageError{errors.New("the producer role verifies tokens: pass --keys FILE (a keyset made with 'canon token keygen')")}
	}
	kcfg := n.kcfg
	kcfg.ClientID = "canon-producer"
	p, err := producer.New(producer.Config{
		Kafka:      kcfg,
		Topics:     n.topics.Names,
		Keys:       n.verifyKeys(),
		Log:        n.log,
		Registerer: n.registry,
		// Follow the changelog: ?wait=applied and the 409 for a client
		// group owned by another principal.
		Partitions:     n.topics.Partitions,
		SequencerGroup: n.topicPrefix + sequencer.DefaultGroup,
		// ?wait=applied: readable on this node's read API, if it has one.
		Readable: n.readable,
	})
	if err != nil {
		return nil, err
	}
	p.Mount(n.mux)
	n.producer = p
	n.ready.Add("producer", p.Ready)
	return func(ctx context.Context) error {
		<-ctx.Done()
		p.Close()
		return nil
	}, nil
}

func setupSequencer(n *node) (func(context.Context) error, error) {
	st, err := n.sharedStore()
	if err != nil {
		return nil, err
	}
	kcfg := n.kcfg
	kcfg.ClientID = "canon-sequencer"
	// The instance id lives with the store: a restart on the same data
	// is the same instance, and fences its predecessor at once.
	instance := n.seq.instanceID
	if instance == "" {
		if instance, err = sequencer.LoadInstanceID(n.dataDir); err != nil {
			return nil, err
		}
	}
	seq, err := sequencer.New(sequencer.Config{
		Kafka:  kcfg,
		Topics: n.topics.Names,
		// Deployments that share a cluster through --topic-prefix must
		// not share a group: one's rebalances would stall the other's.
		Group:              n.topicPrefix + sequencer.DefaultGroup,
		InstanceID:         instance,
		Store:              st,
		SessionTimeout:     n.seq.sessionTimeout,
		TransactionTimeout: n.seq.txnTimeout,
		Log:                n.log,
		Registerer:         n.registry,
	})
	if err != nil {
		return nil, err
	}
	n.ready.Add("sequencer", seq.Ready)
	n.sequencer = seq
	return seq.Run, nil
}
