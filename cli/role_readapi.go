package cli

import (
	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/httpapi"
	"github.com/canon-sync/canon/producer"
	"github.com/canon-sync/canon/projector/live"
	"github.com/canon-sync/canon/readapi"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/webui"
)

// mountReads mounts the readapi role's endpoints on the node's mux: the
// read API from st, the web UI, and the websocket, which pushes through
// pusher; it returns the websocket's server, which runs. partitions and
// serves are the read API's Config fields: with the sequencer in the node
// (canon dev) serves is the sequencer's, otherwise partitions are those
// of the node's read replica.
func (n *node) mountReads(st *store.Store, partitions []int32, serves func(int32) bool, pusher *producer.Producer, feed *changelog.Feed) (*live.Server, error) {
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

	// The websocket: versions of a project live, and pushes on the socket.
	kcfg := n.kcfg
	kcfg.ClientID = "canon-live"
	// Upgrades get the origin check of the HTTP APIs (--cors-origins).
	cors := n.cors
	if cors == nil {
		cors, _ = httpapi.NewCORS(nil) // the server's own origin only
	}
	ws, err := live.New(live.Config{Store: st, Kafka: kcfg, Topics: n.topics.Names, PartitionCount: n.topics.Partitions,
		Partitions: partitions, Serves: serves, Keys: n.verifyKeys(), Pusher: pusher, Log: n.log, Registerer: n.registry,
		CheckOrigin: cors.CheckOrigin, Changelog: feed})
	if err != nil {
		return nil, err
	}
	ws.Mount(n.mux)
	return ws, nil
}
