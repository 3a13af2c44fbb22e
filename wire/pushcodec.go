package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/canon-sync/canon/schemas"
)

// The push request and its answer are the hot path of ingest: each has
// one encoder and one decoder here, written without reflection for the
// messages clients and servers send, and falling back to encoding/json,
// which is the reference (the fuzzers hold the two equal), for anything
// else.

// EncodePush returns the body of a push: the bytes json.Marshal(p)
// returns, written without reflection, with each mutation's args checked
// by schemas.CheckJSON instead of encoding/json's slower compaction of a
// Marshaler's output. Args that are not JSON get json.Marshal's error.
func EncodePush(p *PushRequest) ([]byte, error) {
	size := 64 + len(p.Branch) + len(p.ClientGroup)
	for i := range p.Mutations {
		m := &p.Mutations[i]
		size += 80 + len(m.Client) + len(m.Name) + len(m.Args)
	}
	if b, ok := appendPush(make([]byte, 0, size), p); ok {
		return b, nil
	}
	return json.Marshal(p)
}

// appendPush appends json.Marshal(p); ok is false when an args is not
// JSON.
func appendPush(b []byte, p *PushRequest) (_ []byte, ok bool) {
	b = append(b, '{')
	if p.Branch != "" {
		b = append(b, `"branch":`...)
		b = appendString(b, p.Branch)
		b = append(b, ',')
	}
	b = append(b, `"clientGroup":`...)
	b = appendString(b, p.ClientGroup)
	b = append(b, `,"mutations":`...)
	if p.Mutations == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i := range p.Mutations {
		m := &p.Mutations[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"client":`...)
		b = appendString(b, m.Client)
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, m.ID, 10)
		b = append(b, `,"name":`...)
		b = appendString(b, m.Name)
		b = append(b, `,"args":`...)
		var err error
		if b, err = appendRaw(b, m.Args); err != nil {
			return nil, false
		}
		if m.TS != 0 {
			b = append(b, `,"ts":`...)
			b = strconv.AppendInt(b, m.TS, 10)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), true
}

// appendRaw appends a json.RawMessage as encoding/json does: nil is
// null, anything else is checked, compacted and HTML-escaped; the error
// is json.Compact's. Values that need neither, which is what clients and
// Canon's records hold, are copied as they are.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if valid, compact := schemas.CheckJSON(raw); valid && compact && !needsHTMLEscape(raw) {
		return append(b, raw...), nil // what json.Marshal writes
	}
	start := len(b)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, err
	}
	b = buf.Bytes()
	if needsHTMLEscape(b[start:]) {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, b[start:])
		b = append(b[:start], esc.Bytes()...)
	}
	return b, nil
}

// needsHTMLEscape reports whether json.HTMLEscape would change b: <, >,
// & or U+2028 and U+2029, which json.Marshal escapes.
func needsHTMLEscape(b []byte) bool {
	// bytes.IndexByte is vectorized: four of them beat one loop.
	if bytes.IndexByte(b, '<') >= 0 || bytes.IndexByte(b, '>') >= 0 || bytes.IndexByte(b, '&') >= 0 {
		return true
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], 0xE2)
		if j < 0 {
			return false
		}
		i += j
		if i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
			return true
		}
	}
}

// appendString appends s as json.Marshal writes it (HTML-escaped).
func appendString(b []byte, s string) []byte { return schemas.AppendJSONString(b, s, true) }

// DecodePush decodes a push body exactly as DecodeJSON(body, req, true)
// does, with the same values and the same errors, but faster for the
// bodies clients send: encoding/json's reflection and second scan were
// most of the ingest's CPU time. The fast path checks the JSON as
// json.Valid does while it walks it, once; anything it does not handle
// the way encoding/json would (a member name in another case or with an
// escape, a duplicate member, null, a wrong type, a number that does not
// fit, an unknown member: every error) goes through DecodeJSON.
//
// compactArgs, when not nil, says which mutations' args the fast path
// found to be compact JSON, which need not be checked again.
func DecodePush(body []byte, req *PushRequest) (compactArgs []bool, aerr *Error) {
	if compactArgs, ok := fastDecodePush(body, req); ok {
		return compactArgs, nil
	}
	*req = PushRequest{}
	return nil, DecodeJSON(body, req, true)
}

// maxGuessedMutations bounds the mutations a push's slice is made for
// before they are read (the producer's default batch limit).
const maxGuessedMutations = 1000

// fastDecodePush reports whether it decoded body into req, and which
// args are compact JSON.
func fastDecodePush(d []byte, req *PushRequest) (compactArgs []bool, ok bool) {
	var seen [3]bool
	end, ok := schemas.JSONMembers(d, schemas.SkipJSONSpace(d, 0), 0, func(key []byte, at int) int {
		switch string(key) {
		case "branch":
			return onceAt(&seen[0], stringAt(d, at, 1, &req.Branch))
		case "clientGroup":
			return onceAt(&seen[1], stringAt(d, at, 1, &req.ClientGroup))
		case "mutations":
			return onceAt(&seen[2], pushMutations(d, at, &req.Mutations, &compactArgs))
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
	ms := make([]PushMutation, 0, min((len(d)-at)/128+1, maxGuessedMutations))
	compact := make([]bool, 0, cap(ms))
	var prev PushMutation // whose names the next ones likely repeat
	end, ok := schemas.JSONElements(d, at, 1, func(at int) int {
		pm := PushMutation{Client: prev.Client, Name: prev.Name}
		var seen [5]bool
		var argsCompact bool
		end, ok := schemas.JSONMembers(d, at, 2, func(key []byte, at int) int {
			switch string(key) {
			case "client":
				return onceAt(&seen[0], stringAt(d, at, 3, &pm.Client))
			case "id":
				end, _ := schemas.CheckJSONValue(d, at, 3)
				return onceAt(&seen[1], numberAt(d, at, end, func(v []byte) (ok bool) { pm.ID, ok = schemas.JSONUint(v, 64); return ok }))
			case "name":
				return onceAt(&seen[2], stringAt(d, at, 3, &pm.Name))
			case "args":
				// encoding/json keeps a json.RawMessage's bytes as they
				// are, null included.
				end, c := schemas.CheckJSONValue(d, at, 3)
				if end >= 0 {
					pm.Args, argsCompact = d[at:end], c
				}
				return onceAt(&seen[3], end)
			case "ts":
				end, _ := schemas.CheckJSONValue(d, at, 3)
				return onceAt(&seen[4], numberAt(d, at, end, func(v []byte) (ok bool) { pm.TS, ok = schemas.JSONInt(v, 64); return ok }))
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

// onceAt passes on end when a member is seen for the first time, and -1
// for a duplicate: encoding/json keeps the last of duplicates, which the
// fast paths leave to it.
func onceAt(seen *bool, end int) int {
	if !once(seen) {
		return -1
	}
	return end
}

// once reports whether a member is seen for the first time.
func once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

// DecodeJSON decodes one JSON object with no trailing data, naming the
// field of a type error; strict refuses unknown fields. The error is a
// 400 answer (DecodeError).
func DecodeJSON(body []byte, v any, strict bool) *Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON object")
		}
	}
	return DecodeError(err)
}

// DecodeError maps an error of encoding/json to a 400 naming the field;
// an *Error is passed on as it is, nil is nil.
func DecodeError(err error) *Error {
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var aerr *Error
	switch {
	case errors.As(err, &aerr): // already an answer
		return aerr
	case errors.As(err, &te):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: te.Field,
			Message: fmt.Sprintf("must be %s, got %s", jsonKind(te.Type.String()), te.Value)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformed, Message: "the body is not valid JSON: it ends too early"}
	case errors.As(err, &se):
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformed,
			Message: fmt.Sprintf("the body is not valid JSON: %v (at byte %d)", se, se.Offset)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field,
			Message: fmt.Sprintf("unknown field %q", field), Hint: "check the field's spelling"}
	default:
		return &Error{Status: http.StatusBadRequest, Code: CodeMalformed, Message: "the body is not the expected JSON object: " + err.Error()}
	}
}

func jsonKind(goType string) string {
	switch goType {
	case "uint64", "int64", "int", "uint32", "int32":
		return "a non-negative integer"
	case "string":
		return "a string"
	case "float64":
		return "a number"
	}
	if strings.HasPrefix(goType, "[]") {
		return "an array"
	}
	return "an object"
}

// AppendPushResponse appends the answer to a push as a json.Encoder
// writes it, the final newline included, without reflection: the answer
// of every push, with its outcomes when it waited (?wait=applied). Only
// a response without Mutations (nil, which no handler answers) goes
// through encoding/json.
func AppendPushResponse(b []byte, resp *PushResponse) []byte {
	if resp.Mutations == nil {
		buf := bytes.NewBuffer(b)
		_ = json.NewEncoder(buf).Encode(resp) // strings and numbers only: it does not fail
		return buf.Bytes()
	}
	b = append(b, `{"mutations":[`...)
	for i := range resp.Mutations {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendWritten(append(b, '{'), &resp.Mutations[i])
		b = append(b, '}')
	}
	b = append(b, ']')
	if len(resp.Outcomes) > 0 {
		b = append(b, `,"outcomes":[`...)
		for i := range resp.Outcomes {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendOutcome(b, &resp.Outcomes[i])
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

// appendWritten appends the members of w, as encoding/json writes them.
func appendWritten(b []byte, w *Written) []byte {
	b = append(b, `"client":`...)
	b = appendString(b, w.Client)
	b = append(b, `,"id":`...)
	b = strconv.AppendUint(b, w.ID, 10)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(w.Partition), 10)
	b = append(b, `,"offset":`...)
	return strconv.AppendInt(b, w.Offset, 10)
}

// appendOutcome appends o as encoding/json writes it: its members in
// declaration order, the omitempty ones only when set.
func appendOutcome(b []byte, o *Outcome) []byte {
	b = appendWritten(append(b, '{'), &o.Written)
	b = append(b, `,"status":`...)
	b = appendString(b, o.Status)
	str := func(b []byte, name, v string) []byte {
		if v == "" {
			return b
		}
		b = append(append(append(b, `,"`...), name...), `":`...)
		return appendString(b, v)
	}
	b = str(b, "branch", o.Branch)
	if o.Version != 0 {
		b = strconv.AppendUint(append(b, `,"version":`...), o.Version, 10)
	}
	b = str(b, "error", o.Error)
	b = str(b, "code", o.Code)
	b = str(b, "reason", o.Reason)
	b = str(b, "message", o.Message)
	if o.ExpectedID != 0 {
		b = strconv.AppendUint(append(b, `,"expectedId":`...), o.ExpectedID, 10)
	}
	return append(b, '}')
}

// PushResponseSize is a size of buffer that holds the answer to a push
// of n mutations, with outcomes when outcomes is set, most of the time.
func PushResponseSize(n int, outcomes bool) int {
	if outcomes {
		return 48 + 192*n
	}
	return 32 + 64*n
}

// DecodePushResponse decodes the answer to a push as json.Unmarshal(data,
// r) does. The answer without outcomes, the one of every push that does
// not wait, is decoded without reflection; anything else (outcomes,
// members it does not know, every error) goes through json.Unmarshal.
func DecodePushResponse(data []byte, r *PushResponse) error {
	if r.Mutations == nil && r.Outcomes == nil && fastDecodePushResponse(data, r) {
		return nil
	}
	return json.Unmarshal(data, r)
}

// fastDecodePushResponse reports whether it decoded data into r, which
// it leaves as it is when it does not. It checks the JSON as json.Valid
// does while it walks it.
func fastDecodePushResponse(d []byte, r *PushResponse) bool {
	var ws []Written
	end, ok := schemas.JSONMembers(d, schemas.SkipJSONSpace(d, 0), 0, func(key []byte, at int) int {
		if string(key) != "mutations" || ws != nil {
			return -1
		}
		ws = make([]Written, 0, (len(d)-at)/48+1)
		prev := "" // the last client: the next ones likely repeat it
		end, ok := schemas.JSONElements(d, at, 1, func(at int) int {
			var w Written
			var seen [4]bool
			end, ok := schemas.JSONMembers(d, at, 2, func(key []byte, at int) int {
				end, _ := schemas.CheckJSONValue(d, at, 3)
				if end < 0 {
					return -1
				}
				v := d[at:end]
				var ok bool
				var n int64
				switch string(key) {
				case "client":
					w.Client, ok = schemas.JSONStringLike(v, prev)
					prev = w.Client
					ok = once(&seen[0]) && ok
				case "id":
					w.ID, ok = schemas.JSONUint(v, 64)
					ok = once(&seen[1]) && ok
				case "partition":
					n, ok = schemas.JSONInt(v, 32)
					w.Partition = int32(n)
					ok = once(&seen[2]) && ok
				case "offset":
					w.Offset, ok = schemas.JSONInt(v, 64)
					ok = once(&seen[3]) && ok
				}
				if !ok {
					return -1
				}
				return end
			})
			if !ok {
				return -1
			}
			ws = append(ws, w)
			return end
		})
		if !ok {
			return -1
		}
		return end
	})
	if !ok || ws == nil || schemas.SkipJSONSpace(d, end) != len(d) {
		return false
	}
	r.Mutations = ws
	return true
}
