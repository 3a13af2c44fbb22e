package producer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/canon-sync/canon/wire"
)

// replicachePush is Replicache's push request, pushVersion 1.
type replicachePush struct {
	PushVersion   int                  `json:"pushVersion"`
	ClientGroupID string               `json:"clientGroupID"`
	Mutations     []replicacheMutation `json:"mutations"`
	ProfileID     string               `json:"profileID"`
	SchemaVersion string               `json:"schemaVersion"`
	// sent counts the mutations in the body; Mutations holds the prefix
	// taken (see decodeReplicachePush).
	sent int
}

// replicacheMutation is one mutation of a Replicache push. Its timestamp
// (milliseconds since the page loaded, performance.now()) is not read: it
// is no clock Canon can store as a time.
type replicacheMutation struct {
	ClientID string          `json:"clientID"`
	ID       uint64          `json:"id"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args"`
}

// handleReplicachePush maps Replicache's push onto Canon's: the Replicache
// client id is the client, its client group the group, the branch comes
// from ?branch= (main by default). Replicache resends pending mutations
// until a pull confirms them; those already applied are skipped as
// duplicates downstream.
//
// Replicache sends every pending mutation in one push, so an offline
// backlog can exceed the push limits (MaxBatch mutations, MaxBodyBytes).
// Replicache allows a server to process a prefix of a push: the longest
// prefix within the limits is taken and answered as a success, the next
// push carries the rest. The body is read as it arrives, up to
// MaxReplicacheBodyBytes, and only that prefix is kept.
func (p *Producer) handleReplicachePush(w http.ResponseWriter, r *http.Request) {
	in := &incoming{api: "replicache", org: r.PathValue("org"), project: r.PathValue("project"), start: p.cfg.Now()}
	var aerr *wire.Error
	if in.claims, aerr = p.authorize(r, in.org, in.project); aerr == nil {
		aerr = checkJSONType(r)
	}
	if aerr != nil {
		p.fail(w, "replicache", aerr)
		return
	}
	if r.ContentLength > p.cfg.MaxReplicacheBodyBytes {
		p.fail(w, "replicache", p.replicacheTooLarge(r.ContentLength))
		return
	}
	req, aerr := p.decodeReplicachePush(http.MaxBytesReader(w, r.Body, p.cfg.MaxReplicacheBodyBytes))
	if aerr != nil {
		p.fail(w, "replicache", aerr)
		return
	}
	if req.PushVersion != 1 {
		// Replicache's answer for a protocol it must not speak.
		p.m.refused("replicache", wire.CodeVersion)
		writeJSON(w, http.StatusOK, map[string]string{"error": "VersionNotSupported", "versionType": "push"})
		return
	}
	if len(req.Mutations) == 0 {
		writeJSON(w, http.StatusOK, struct{}{})
		return
	}
	if len(req.Mutations) < req.sent {
		p.cfg.Log.Debug("replicache push over the limits: took a prefix", "org", in.org, "project", in.project,
			"clientGroup", req.ClientGroupID, "taken", len(req.Mutations), "sent", req.sent)
	}
	pms := make([]wire.PushMutation, len(req.Mutations))
	for i, m := range req.Mutations {
		// ts is the receive time: Replicache's timestamp counts from the
		// page's load, not from the epoch (docs/ingest.md).
		pms[i] = wire.PushMutation{Client: m.ClientID, ID: m.ID, Name: m.Name, Args: m.Args, TS: in.start.UnixMilli()}
	}
	if _, ok := p.ingest(w, r, in, r.URL.Query().Get("branch"), req.ClientGroupID, pms); ok {
		writeJSON(w, http.StatusOK, struct{}{})
	}
}

// decodeReplicachePush reads a push from body as it arrives. Of its
// mutations it keeps the longest prefix within MaxBatch mutations and
// MaxBodyBytes of mutation JSON, and at least one (whose own limits the
// encoding checks); the others are read and dropped. The object's fields
// may come in any order (Replicache sends pushVersion after the
// mutations), so the whole body is read.
func (p *Producer) decodeReplicachePush(body io.Reader) (replicachePush, *wire.Error) {
	var req replicachePush
	dec := json.NewDecoder(body)
	err := expectDelim(dec, '{')
	var size int64
	for err == nil && dec.More() {
		var tok json.Token
		if tok, err = dec.Token(); err != nil {
			break
		}
		switch key, _ := tok.(string); key {
		case "pushVersion":
			err = dec.Decode(&req.PushVersion)
		case "clientGroupID":
			// Raw first: a string decoder turns bytes that are not
			// UTF-8 into U+FFFD, so two groups would become one.
			var raw json.RawMessage
			if err = dec.Decode(&raw); err == nil {
				if aerr := wire.FirstNotUTF8([]wire.RawField{{Name: "clientGroupID", Value: raw}}); aerr != nil {
					return req, aerr
				}
				err = json.Unmarshal(raw, &req.ClientGroupID)
			}
		case "profileID":
			err = dec.Decode(&req.ProfileID)
		case "schemaVersion":
			err = dec.Decode(&req.SchemaVersion)
		case "mutations":
			err = p.decodeReplicacheMutations(dec, &req, &size)
		default:
			// Replicache may add fields: unknown ones are ignored.
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
	}
	if err == nil {
		err = expectDelim(dec, '}')
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return req, p.replicacheTooLarge(-1)
	}
	if err != nil {
		return req, wire.DecodeError(err)
	}
	return req, nil
}

// decodeReplicacheMutations reads the mutations array, keeping the prefix
// within the limits in req.Mutations; size is the bytes kept.
func (p *Producer) decodeReplicacheMutations(dec *json.Decoder, req *replicachePush, size *int64) error {
	if tok, err := dec.Token(); err != nil || tok == nil {
		return err // null: no mutations
	} else if d, ok := tok.(json.Delim); !ok || d != '[' {
		return &json.UnmarshalTypeError{Value: fmt.Sprint(tok), Type: typeOfMutations, Field: "mutations"}
	}
	full := false
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		i := req.sent
		req.sent++
		if full || (i > 0 && (i >= p.cfg.MaxBatch || *size+int64(len(raw)) > p.cfg.MaxBodyBytes)) {
			full = true // the rest goes in a later push
			continue
		}
		if aerr := wire.CheckReplicacheMutationUTF8(i, raw); aerr != nil {
			return aerr
		}
		var m replicacheMutation
		if err := json.Unmarshal(raw, &m); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				te.Field = fmt.Sprintf("mutations[%d].%s", i, te.Field)
			}
			return err
		}
		*size += int64(len(raw))
		req.Mutations = append(req.Mutations, m)
	}
	_, err := dec.Token() // ']'
	return err
}

var typeOfMutations = reflect.TypeFor[[]replicacheMutation]()

// expectDelim reads the next token, which must be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("expected %q, got %v", string(d), tok)
	}
	return nil
}

func (p *Producer) replicacheTooLarge(n int64) *wire.Error {
	msg := fmt.Sprintf("the body is over the limit of %d bytes of a Replicache push", p.cfg.MaxReplicacheBodyBytes)
	if n > 0 {
		msg = fmt.Sprintf("the body is %d bytes, over the limit of %d bytes of a Replicache push", n, p.cfg.MaxReplicacheBodyBytes)
	}
	return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeTooLarge, Message: msg,
		Hint: "the client holds too many pending mutations for one push: send fewer before going offline, or raise the producer's MaxReplicacheBodyBytes"}
}
