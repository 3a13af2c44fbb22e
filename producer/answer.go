package producer

import (
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/wire"
)

// writePushResponse writes the answer to a push, with its outcomes when
// it waited, as writeJSON does, with its length.
func writePushResponse(w http.ResponseWriter, status int, resp *wire.PushResponse) {
	b := wire.AppendPushResponse(make([]byte, 0, wire.PushResponseSize(len(resp.Mutations), len(resp.Outcomes) > 0)), resp)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// The length lets the client size its buffer, and spares chunking.
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
