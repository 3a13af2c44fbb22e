package producer

import (
	"net/http"
	"strconv"

	"github.com/canon-sync/canon/schemas"
)

// decodePush decodes a push body exactly as decodeJSON(body, req, true)
// does, with the same values and the same errors, but faster for the
// bodies clients send: encoding/json's reflection and second scan were
// most of the ingest's CPU time. The fast path checks the JSON as
// json.Valid does while it walks it, once; anything it does not handle
// the way encoding/json would (a member name in another case or with an
// escape, a duplicate member, null, a wrong type, a number that does not
// fit, an unknown member: every error) goes through decodeJSON.
//
// compactArgs, when not nil, says which mutations' args the fast path
// found to be compact JSON, which write then need not check again.
func decodePush(body []byte, req *PushRequest) (compactArgs []bool, aerr *Error) {
	if compactArgs, ok := fastDecodePush(body, req); ok {
		return compactArgs, nil
	}
	*req = PushRequest{}
	return nil, decodeJSON(body, req, true)
}

// fastDecodePush reports whether it decoded body into req, and which
// args are compact JSON.
func fastDecodePush(d []byte, req *PushRequest) (compactArgs []bool, ok bool) {
	var seen [3]bool
	end, ok := schemas.JSONMembers(d, schemas.SkipJSONSpace(d, 0), 0, func(key []byte, at int) int {
		switch string(key) {
		case "branch":
			return once(&seen[0], stringAt(d, at, 1, &req.Branch))
		case "clientGroup":
			return once(&seen[1], stringAt(d, at, 1, &req.ClientGroup))
		case "mutations":
			return once(&seen[2], pushMutations(d, at, &req.Mutations, &compactArgs))
		}
		return -1
	})
	return compactArgs, ok && schemas.SkipJSONSpace(d, end) == len(d)
}

// pushMutations reads the array of mutations at d[at] into out and
// returns the index after it, or -1.
func pushMutations(d []byte, at int, out *[]PushMutation, compactArgs *[]bool) int {
	// A guess of the count from the size saves regrowing; encoding/json
	// makes an empty array an empty slice, not nil.
	ms := make([]PushMutation, 0, min((len(d)-at)/128+1, DefaultMaxBatch))
	compact := make([]bool, 0, cap(ms))
	var prev PushMutation // whose names the next ones likely repeat
	end, ok := schemas.JSONElements(d, at, 1, func(at int) int {
		pm := PushMutation{Client: prev.Client, Name: prev.Name}
		var seen [5]bool
		var argsCompact bool
		end, ok := schemas.JSONMembers(d, at, 2, func(key []byte, at int) int {
			switch string(key) {
			case "client":
				return once(&seen[0], stringAt(d, at, 3, &pm.Client))
			case "id":
				end, _ := schemas.CheckJSONValue(d, at, 3)
				return once(&seen[1], numberAt(d, at, end, func(v []byte) (ok bool) { pm.ID, ok = schemas.JSONUint(v, 64); return ok }))
			case "name":
				return once(&seen[2], stringAt(d, at, 3, &pm.Name))
			case "args":
				// encoding/json keeps a json.RawMessage's bytes as they
				// are, null included.
				end, c := schemas.CheckJSONValue(d, at, 3)
				if end >= 0 {
					pm.Args, argsCompact = d[at:end], c
				}
				return once(&seen[3], end)
			case "ts":
				end, _ := schemas.CheckJSONValue(d, at, 3)
				return once(&seen[4], numberAt(d, at, end, func(v []byte) (ok bool) { pm.TS, ok = schemas.JSONInt(v, 64); return ok }))
			}
			return -1
		})
		if !ok {
			return -1
		}
		// A member that is absent is the zero value, as for encoding/json.
		if !seen[0] {
			pm.Client = ""
		}
		if !seen[2] {
			pm.Name = ""
		}
		ms = append(ms, pm)
		compact = append(compact, argsCompact)
		prev = pm
		return end
	})
	if !ok {
		return -1
	}
	*out, *compactArgs = ms, compact
	return end
}

// stringAt checks the value at d[at], inside depth objects and arrays,
// reads it into out if it is a string and returns the index after it, or
// -1. The string already in out is reused if it is the same.
func stringAt(d []byte, at, depth int, out *string) int {
	end, _ := schemas.CheckJSONValue(d, at, depth)
	if end < 0 {
		return -1
	}
	s, ok := schemas.JSONStringLike(d[at:end], *out)
	if !ok {
		return -1
	}
	*out = s
	return end
}

// numberAt returns end if the checked value d[at:end] is read by read, or
// -1.
func numberAt(d []byte, at, end int, read func([]byte) bool) int {
	if end < 0 || !read(d[at:end]) {
		return -1
	}
	return end
}

// once passes on end when a member is seen for the first time, and -1
// for a duplicate: encoding/json keeps the last of duplicates, which the
// fast path leaves to it.
func once(seen *bool, end int) int {
	if *seen {
		return -1
	}
	*seen = true
	return end
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
		b = schemas.AppendJSONString(b, m.Client, true)
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
