package readapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"

	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
	"github.com/canon-sync/canon/wire"
)

// Replicache's pull, pullVersion 1, over Canon's store.
//
// Keys: an item is "<collection>/<id>" with its body (the item's data, as
// canonical JSON) as the value; its meta is not part of the Replicache
// view. A scalar is "_scalar/<name>" with its JSON value: collection
// names start with a letter or digit, so no item key starts with '_'.
//
// Cookie: the branch version the client's view is at, a JSON number.
// After a reset (below) it is {"order": N, "version": V}: the client's
// view is at version V, and N, never less than a cookie the client had,
// keeps the cookies Replicache sees from going down, which it refuses.
//
// The answer to a pull with cookie C on a branch whose head is H:
//
//   - C null (a new client group): a "clear" then every key at H;
//   - C <= H: the changes from C to H, from the store's item index
//     (store.ChangesSince): a "put" for each item written after C, a
//     "del" for each item deleted since, and the scalars that changed;
//   - C > H, a cookie from the future: the store lost versions the client
//     has seen (the topics were recreated, or this instance lags the one
//     that answered before). If the store knows the client group, a reset:
//     "clear" and every key at H, cookie {"order": C, "version": H}; if it
//     does not know the group either, {"error": "ClientStateNotFound"}:
//     Replicache then drops the client group's state and starts a new one.
//
// lastMutationIDChanges holds the last ids on the branch of the group's
// clients, read in the same store snapshot as the patch, so that a client
// never sees a mutation confirmed without its effect in the view. They are
// all listed when anything changed (Replicache allows it), none when the
// cookie is the head. A client group that has never pushed is unknown to
// the store until its first mutation is decided; it pulls like any other.

// ScalarKeyPrefix starts the Replicache key of a scalar.
const ScalarKeyPrefix = "_scalar/"

// ItemKey is the Replicache key of an item.
func ItemKey(collection, id string) string { return collection + "/" + id }

type pullRequest struct {
	PullVersion   int             `json:"pullVersion"`
	ClientGroupID string          `json:"clientGroupID"`
	Cookie        json.RawMessage `json:"cookie"`
	ProfileID     string          `json:"profileID"`
	SchemaVersion string          `json:"schemaVersion"`
}

type pullResponse struct {
	Cookie                any               `json:"cookie"`
	LastMutationIDChanges map[string]uint64 `json:"lastMutationIDChanges"`
	Patch                 []patchOp         `json:"patch"`
}

type patchOp struct {
	Op    string          `json:"op"`
	Key   string          `json:"key,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
}

// cookie is a parsed pull cookie.
type cookie struct {
	null           bool
	order, version uint64
}

type orderedCookie struct {
	Order   uint64 `json:"order"`
	Version uint64 `json:"version"`
}

func parseCookie(raw json.RawMessage) (cookie, *wire.Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return cookie{null: true}, nil
	}
	var v uint64
	if err := json.Unmarshal(raw, &v); err == nil {
		return cookie{order: v, version: v}, nil
	}
	var oc orderedCookie
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&oc); err == nil && oc.Version <= oc.Order && bytes.Contains(raw, []byte(`"order"`)) {
		return cookie{order: oc.Order, version: oc.Version}, nil
	}
	return cookie{}, invalid("cookie", fmt.Sprintf("%.100s is not a cookie Canon issued", raw),
		"send back the cookie of the last pull response, or null to start over")
}

// encode is the cookie of a view at version v for a client whose cookie
// had order at least order.
func encodeCookie(order, v uint64) any {
	order = max(order, v)
	if order == v {
		return v
	}
	return orderedCookie{Order: order, Version: v}
}

func (s *Server) handleReplicachePull(w http.ResponseWriter, r *http.Request) {
	c, ok := s.begin(w, r, "branch")
	if !ok {
		return
	}
	body, aerr := s.readPull(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req pullRequest
	// Replicache may add fields: unknown ones are ignored.
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeMalformed,
			Message: "the body is not a Replicache pull request: " + err.Error()})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if req.PullVersion != 1 {
		// Replicache's answer for a protocol it must not speak.
		writeJSON(w, http.StatusOK, map[string]string{"error": "VersionNotSupported", "versionType": "pull"})
		return
	}
	if err := schemas.ValidateClient("clientGroupID", req.ClientGroupID); err != nil {
		writeError(w, invalid("clientGroupID", err.Error(), ""))
		return
	}
	ck, aerr := parseCookie(req.Cookie)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	opt := store.ChangesOptions{Bodies: true, Group: req.ClientGroupID}
	ch, err := s.cfg.Store.ChangesSince(c.org, c.project, c.branch, ck.version, opt)
	future := errors.Is(err, store.ErrNotFound)
	if future {
		ch, err = s.cfg.Store.ChangesSince(c.org, c.project, c.branch, 0, opt)
	}
	if err != nil {
		writeError(w, s.internal(r, err))
		return
	}
	if ch.GroupPrincipal != "" && ch.GroupPrincipal != c.claims.Principal() {
		writeError(w, &wire.Error{Status: http.StatusForbidden, Code: wire.CodeForbidden,
			Message: fmt.Sprintf("client group %s of %s/%s belongs to another principal", req.ClientGroupID, c.org, c.project),
			Hint:    "a client group is bound to the principal that first pushed with it: pull with that principal's token"})
		return
	}
	if future && !ch.GroupKnown {
		writeJSON(w, http.StatusOK, map[string]string{"error": "ClientStateNotFound"})
		return
	}
	resp := pullResponse{Cookie: encodeCookie(ck.order, ch.To), LastMutationIDChanges: map[string]uint64{}, Patch: patchOf(&ch, ck.null || future)}
	if ch.To != ck.version || future || ck.null {
		resp.LastMutationIDChanges = ch.GroupLastIDs
	}
	writeJSON(w, http.StatusOK, resp)
}

// patchOf turns changes into Replicache patch operations; reset starts
// with a clear (the changes are then from the empty state).
func patchOf(ch *store.Changes, reset bool) []patchOp {
	ops := make([]patchOp, 0, len(ch.Deletes)+len(ch.Puts)+len(ch.Scalars)+1)
	if reset {
		ops = append(ops, patchOp{Op: "clear"})
	}
	for _, d := range ch.Deletes {
		ops = append(ops, patchOp{Op: "del", Key: ItemKey(d.Collection, d.ID)})
	}
	for _, p := range ch.Puts {
		ops = append(ops, patchOp{Op: "put", Key: ItemKey(p.Collection, p.ID), Value: ch.Bodies[p.Hash]})
	}
	from := ch.ScalarsFrom
	if reset {
		from = nil
	}
	for _, name := range sortedKeys(from) {
		if _, ok := ch.Scalars[name]; !ok {
			ops = append(ops, patchOp{Op: "del", Key: ScalarKeyPrefix + name})
		}
	}
	for _, name := range sortedKeys(ch.Scalars) {
		if old, ok := from[name]; !ok || !bytes.Equal(old, ch.Scalars[name]) {
			ops = append(ops, patchOp{Op: "put", Key: ScalarKeyPrefix + name, Value: ch.Scalars[name]})
		}
	}
	return ops
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// readPull checks the content type and reads at most MaxPullBytes.
func (s *Server) readPull(w http.ResponseWriter, r *http.Request) ([]byte, *wire.Error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, &wire.Error{Status: http.StatusUnsupportedMediaType, Code: wire.CodeUnsupportedMedia,
			Message: fmt.Sprintf("content type %q is not application/json", r.Header.Get("Content-Type")),
			Hint:    "send the pull request as JSON with 'Content-Type: application/json'"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxPullBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeTooLarge,
			Message: fmt.Sprintf("the body is over the limit of %d bytes", s.cfg.MaxPullBytes),
			Hint:    "a pull request is a small JSON object: check what the client sends"}
	}
	if err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeMalformed, Message: "read body: " + err.Error()}
	}
	return body, nil
}
