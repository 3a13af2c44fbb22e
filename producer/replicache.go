package producer

import (
	"encoding/json"
	"math"
	"net/http"
)

// replicachePush is Replicache's push request, pushVersion 1.
type replicachePush struct {
	PushVersion   int                  `json:"pushVersion"`
	ClientGroupID string               `json:"clientGroupID"`
	Mutations     []replicacheMutation `json:"mutations"`
	ProfileID     string               `json:"profileID"`
	SchemaVersion string               `json:"schemaVersion"`
}

type replicacheMutation struct {
	ClientID  string          `json:"clientID"`
	ID        uint64          `json:"id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args"`
	Timestamp float64         `json:"timestamp"`
}

// handleReplicachePush maps Replicache's push onto Canon's: the Replicache
// client id is the client, its client group the group, the branch comes
// from ?branch= (main by default). Replicache resends pending mutations
// until a pull confirms them; those already applied are skipped as
// duplicates downstream.
func (p *Producer) handleReplicachePush(w http.ResponseWriter, r *http.Request) {
	in, ok := p.accept(w, r, "replicache")
	if !ok {
		return
	}
	defer in.release()
	var req replicachePush
	// Replicache may add fields: unknown ones are ignored here.
	if aerr := decodeJSON(in.body, &req, false); aerr != nil {
		p.fail(w, "replicache", aerr)
		return
	}
	if req.PushVersion != 1 {
		// Replicache's answer for a protocol it must not speak.
		p.m.refused("replicache", CodeVersion)
		writeJSON(w, http.StatusOK, map[string]string{"error": "VersionNotSupported", "versionType": "push"})
		return
	}
	if len(req.Mutations) == 0 {
		writeJSON(w, http.StatusOK, struct{}{})
		return
	}
	pms := make([]PushMutation, len(req.Mutations))
	for i, m := range req.Mutations {
		ts := int64(0)
		if m.Timestamp > 0 && m.Timestamp < math.MaxInt64 {
			ts = int64(m.Timestamp) // Replicache's timestamp is a client clock in ms
		}
		pms[i] = PushMutation{Client: m.ClientID, ID: m.ID, Name: m.Name, Args: m.Args, TS: ts}
	}
	if _, ok := p.ingest(w, r, in, r.URL.Query().Get("branch"), req.ClientGroupID, pms); ok {
		writeJSON(w, http.StatusOK, struct{}{})
	}
}
