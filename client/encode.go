package client

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/canon-sync/canon/schemas"
)

// encodePush returns the body of a push: the bytes json.Marshal(p)
// returns, written without reflection, with each mutation's args checked
// by schemas.CheckJSON instead of encoding/json's slower compaction of a
// Marshaler's output. Args that are not JSON get json.Marshal's error.
func encodePush(p *Push) ([]byte, error) {
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
func appendPush(b []byte, p *Push) (_ []byte, ok bool) {
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
		if b, ok = appendRaw(b, m.Args); !ok {
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
// null, anything else is checked, compacted and HTML-escaped.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	if valid, compact := schemas.CheckJSON(raw); valid && compact && !needsHTMLEscape(raw) {
		return append(b, raw...), true // what json.Marshal writes
	}
	start := len(b)
	buf := bytes.NewBuffer(b)
	if json.Compact(buf, raw) != nil {
		return nil, false
	}
	b = buf.Bytes()
	if needsHTMLEscape(b[start:]) {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, b[start:])
		b = append(b[:start], esc.Bytes()...)
	}
	return b, true
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

func appendString(b []byte, s string) []byte { return schemas.AppendJSONString(b, s, true) }

// decodeResult decodes the answer to a push as json.Unmarshal(data, r)
// does. The answer without outcomes, the one of every push that does not
// wait, is decoded without reflection; anything else (outcomes, members
// it does not know, every error) goes through json.Unmarshal.
func decodeResult(data []byte, r *Result) error {
	if r.Mutations == nil && r.Outcomes == nil && fastDecodeResult(data, r) {
		return nil
	}
	return json.Unmarshal(data, r)
}

// fastDecodeResult reports whether it decoded data into r, which it
// leaves as it is when it does not. It checks the JSON as json.Valid
// does while it walks it.
func fastDecodeResult(d []byte, r *Result) bool {
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

// once reports whether a member is seen for the first time: encoding/json
// keeps the last of duplicates, which the fast paths leave to it.
func once(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}
