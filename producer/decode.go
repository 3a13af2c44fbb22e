package producer

import (
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/internal/jsonfast"
)

// decodePush decodes a push body exactly as decodeJSON(body, req, true)
// does, with the same values and the same errors, but faster for the
// bodies clients send: encoding/json's reflection and second scan were
// most of the ingest's CPU time. The fast path checks the body as
// json.Valid does, then walks it; anything it does not handle the way
// encoding/json would (a member name in another case or with an escape,
// a duplicate member, null, a wrong type, a number that does not fit, an
// unknown member: every error) goes through decodeJSON.
func decodePush(body []byte, req *PushRequest) *Error {
	if fastDecodePush(body, req) {
		return nil
	}
	*req = PushRequest{}
	return decodeJSON(body, req, true)
}

// fastDecodePush reports whether it decoded body into req.
func fastDecodePush(body []byte, req *PushRequest) bool {
	if !jsonfast.Valid(body) {
		return false
	}
	i := jsonfast.SkipSpace(body, 0)
	if body[i] != '{' {
		return false
	}
	var seen [3]bool
	var ok bool
	_, walked := jsonfast.Object(body, i, func(key, val []byte) bool {
		switch string(key) {
		case "branch":
			req.Branch, ok = jsonfast.String(val)
			return once(&seen[0]) && ok
		case "clientGroup":
			req.ClientGroup, ok = jsonfast.String(val)
			return once(&seen[1]) && ok
		case "mutations":
			return once(&seen[2]) && pushMutations(val, &req.Mutations)
		}
		return false
	})
	return walked
}

func pushMutations(val []byte, out *[]PushMutation) bool {
	if val[0] != '[' {
		return false
	}
	// A guess of the count from the size saves regrowing; encoding/json
	// makes an empty array an empty slice, not nil.
	ms := make([]PushMutation, 0, min(len(val)/128+1, DefaultMaxBatch))
	_, ok := jsonfast.Array(val, 0, func(v []byte) bool {
		if v[0] != '{' {
			return false
		}
		var pm PushMutation
		var seen [5]bool
		var ok bool
		_, walked := jsonfast.Object(v, 0, func(key, v []byte) bool {
			switch string(key) {
			case "client":
				pm.Client, ok = jsonfast.String(v)
				return once(&seen[0]) && ok
			case "id":
				pm.ID, ok = jsonfast.Uint(v, 64)
				return once(&seen[1]) && ok
			case "name":
				pm.Name, ok = jsonfast.String(v)
				return once(&seen[2]) && ok
			case "args":
				// encoding/json keeps a json.RawMessage's bytes as they are,
				// null included.
				pm.Args = v
				return once(&seen[3])
			case "ts":
				pm.TS, ok = jsonfast.Int(v, 64)
				return once(&seen[4]) && ok
			}
			return false
		})
		ms = append(ms, pm)
		return walked
	})
	*out = ms
	return ok
}

// once reports whether a member is seen for the first time: encoding/json
// keeps the last of duplicates, which the fast path leaves to it.
func once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

// writePushResponse writes the answer to a push as writeJSON does. The
// answer without outcomes, the one of every push that does not wait, is
// written without reflection.
func writePushResponse(w http.ResponseWriter, status int, resp PushResponse) {
	if resp.Mutations == nil || len(resp.Outcomes) > 0 {
		writeJSON(w, status, resp)
		return
	}
	b := appendWritten(make([]byte, 0, 32+64*len(resp.Mutations)), resp.Mutations)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	// The length lets the client size its buffer, and spares chunking.
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// appendWritten appends what a json.Encoder writes for a PushResponse
// without outcomes, the final newline included.
func appendWritten(b []byte, ws []Written) []byte {
	b = append(b, `{"mutations":[`...)
	for i := range ws {
		m := &ws[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"client":`...)
		b = jsonfast.AppendString(b, m.Client, true)
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, m.ID, 10)
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(m.Partition), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, m.Offset, 10)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}
