package producer

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodePush decodes a push body exactly as decodeJSON(body, req, true)
// does, with the same values and the same errors, but faster for the
// bodies clients send: encoding/json's reflection and second scan were
// most of the ingest's CPU time. The fast path checks the body with
// json.Valid, then walks it; anything it does not handle the way
// encoding/json would (a member name in another case, a duplicate member,
// null, a wrong type, a number that does not fit: every error) goes
// through decodeJSON.
func decodePush(body []byte, req *PushRequest) *Error {
	if fastDecodePush(body, req) {
		return nil
	}
	*req = PushRequest{}
	return decodeJSON(body, req, true)
}

// fastDecodePush reports whether it decoded body into req.
func fastDecodePush(body []byte, req *PushRequest) bool {
	if !json.Valid(body) {
		return false
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return false
	}
	var seen [3]bool
	ok := members(body, i, func(key, val []byte) bool {
		switch string(key) {
		case "branch":
			return once(&seen[0]) && str(val, &req.Branch)
		case "clientGroup":
			return once(&seen[1]) && str(val, &req.ClientGroup)
		case "mutations":
			return once(&seen[2]) && mutations(val, &req.Mutations)
		}
		return false
	})
	return ok
}

func mutations(val []byte, out *[]PushMutation) bool {
	if val[0] != '[' {
		return false
	}
	// A guess of the count, from the body's size, saves regrowing.
	ms := make([]PushMutation, 0, min(len(val)/128+1, DefaultMaxBatch))
	i := skipSpace(val, 1)
	if val[i] == ']' {
		*out = ms
		return true
	}
	for {
		if val[i] != '{' {
			return false
		}
		var pm PushMutation
		var seen [5]bool
		end, ok := memberList(val, i, func(key, v []byte) bool {
			switch string(key) {
			case "client":
				return once(&seen[0]) && str(v, &pm.Client)
			case "id":
				return once(&seen[1]) && uintValue(v, &pm.ID)
			case "name":
				return once(&seen[2]) && str(v, &pm.Name)
			case "args":
				// encoding/json keeps a json.RawMessage's bytes as they are,
				// null included.
				pm.Args = v
				return once(&seen[3])
			case "ts":
				return once(&seen[4]) && intValue(v, &pm.TS)
			}
			return false
		})
		if !ok {
			return false
		}
		ms = append(ms, pm)
		i = skipSpace(val, end)
		if val[i] == ']' {
			*out = ms
			return true
		}
		i = skipSpace(val, i+1) // ','
	}
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

// str reads a JSON string as encoding/json does (invalid UTF-8 becomes
// U+FFFD).
func str(val []byte, out *string) bool {
	if val[0] != '"' {
		return false
	}
	s := val[1 : len(val)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		*out = string(s)
		return true
	}
	return json.Unmarshal(val, out) == nil
}

// uintValue reads a JSON number into a uint64 as encoding/json does; a
// fraction, an exponent, a sign or an overflow is left to it.
func uintValue(val []byte, out *uint64) bool {
	if val[0] < '0' || val[0] > '9' {
		return false
	}
	n, err := strconv.ParseUint(string(val), 10, 64)
	*out = n
	return err == nil
}

// intValue reads a JSON number into an int64 as encoding/json does.
func intValue(val []byte, out *int64) bool {
	if val[0] != '-' && (val[0] < '0' || val[0] > '9') {
		return false
	}
	n, err := strconv.ParseInt(string(val), 10, 64)
	*out = n
	return err == nil
}

// The functions below walk JSON that json.Valid accepted: they only need
// to find where strings and nested values end.

// members calls fn with the key and raw value of each member of the
// object that starts at d[i], until fn returns false.
func members(d []byte, i int, fn func(key, val []byte) bool) bool {
	_, ok := memberList(d, i, fn)
	return ok
}

// memberList is members that also returns the index after the object.
// A key with escapes is refused: it may be a known name in disguise.
func memberList(d []byte, i int, fn func(key, val []byte) bool) (int, bool) {
	i = skipSpace(d, i+1)
	if d[i] == '}' {
		return i + 1, true
	}
	for {
		ke := endString(d, i)
		key := d[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return 0, false
		}
		i = skipSpace(d, skipSpace(d, ke)+1) // ':'
		ve := endValue(d, i)
		if !fn(key, d[i:ve]) {
			return 0, false
		}
		i = skipSpace(d, ve)
		if d[i] == '}' {
			return i + 1, true
		}
		i = skipSpace(d, i+1) // ','
	}
}

func skipSpace(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// endString returns the index after the string that starts at d[i].
func endString(d []byte, i int) int {
	for i++; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(d)
}

// endValue returns the index after the value that starts at d[i].
func endValue(d []byte, i int) int {
	switch d[i] {
	case '"':
		return endString(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				i = endString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(d)
	}
	for ; i < len(d); i++ {
		switch d[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return len(d)
}
