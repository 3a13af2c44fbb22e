package client

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// encodePush returns the body of a push: the bytes json.Marshal(p)
// returns, written without reflection, and each mutation's args checked
// and compacted in one pass instead of encoding/json's slower
// Marshaler path. Args that are not JSON get json.Marshal's error.
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
	for i, c := range b {
		switch {
		case c == '<' || c == '>' || c == '&':
			return true
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8:
			return true
		}
	}
	return false
}

// appendString appends s as json.Marshal writes it. Printable ASCII other
// than ", \, <, > and & is written as it is; anything else goes through
// encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
