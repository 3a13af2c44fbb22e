package live

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"

	"github.com/canon-sync/canon/schemas"
)

// The hub encodes every version once, on the changelog's goroutine, so
// its encoding bounds the fan-out of many projects with few subscribers
// each. appendVersion writes the bytes json.Marshal gives for a
// VersionMessage (the same field order, sorted map keys, HTML-safe
// escaping, compacted raw values; a test holds the two equal), without
// reflection and into the frame's own buffer.

// maxFrameHeader is the longest header of an unmasked server frame.
const maxFrameHeader = 10

// versionFrame is v's version message as one websocket text frame.
func versionFrame(v *schemas.Version) ([]byte, error) {
	b := make([]byte, maxFrameHeader, maxFrameHeader+512+128*(len(v.Items)+len(v.Mutations)))
	b, err := appendVersion(b, v)
	if err != nil {
		return nil, err
	}
	return frameInPlace(b), nil
}

// frameInPlace writes the frame header for the payload b[maxFrameHeader:]
// into the space reserved before it and returns the frame.
func frameInPlace(b []byte) []byte {
	n := len(b) - maxFrameHeader
	switch {
	case n < 126:
		b[8], b[9] = 0x81, byte(n)
		return b[8:]
	case n <= 0xffff:
		b[6], b[7], b[8], b[9] = 0x81, 126, byte(n>>8), byte(n)
		return b[6:]
	default:
		b[0], b[1] = 0x81, 127
		for i := range 8 {
			b[2+i] = byte(uint64(n) >> (56 - 8*i))
		}
		return b
	}
}

// encodeVersion is the one encoding of a version message.
func encodeVersion(v *schemas.Version) ([]byte, error) {
	return appendVersion(nil, v)
}

func appendVersion(b []byte, v *schemas.Version) ([]byte, error) {
	b = append(b, `{"type":"version","org":`...)
	b = appendString(b, v.Org)
	b = append(b, `,"project":`...)
	b = appendString(b, v.Project)
	b = append(b, `,"branch":`...)
	b = appendString(b, v.Branch)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, v.Version, 10)
	b = append(b, `,"parent":`...)
	b = strconv.AppendUint(b, v.Parent, 10)
	if v.Base != nil {
		b = append(b, `,"base":{"branch":`...)
		b = appendString(b, v.Base.Branch)
		b = append(b, `,"version":`...)
		b = strconv.AppendUint(b, v.Base.Version, 10)
		b = append(b, '}')
	}
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, v.TS, 10)
	b = append(b, `,"stateHash":`...)
	b = appendString(b, v.StateHash)
	b = append(b, `,"scalars":{`...)
	var err error
	for i, name := range sortedKeys(v.Scalars) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, name)
		b = append(b, ':')
		if b, err = appendRaw(b, v.Scalars[name]); err != nil {
			return nil, err
		}
	}
	b = append(b, `},"items":[`...)
	for i := range v.Items {
		it := &v.Items[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"collection":`...)
		b = appendString(b, it.Collection)
		b = append(b, `,"id":`...)
		b = appendString(b, it.ID)
		b = append(b, `,"op":`...)
		b = appendString(b, it.Op)
		if len(it.Meta) > 0 {
			b = append(b, `,"meta":`...)
			if b, err = appendRaw(b, it.Meta); err != nil {
				return nil, err
			}
		}
		if it.Hash != "" {
			b = append(b, `,"hash":`...)
			b = appendString(b, it.Hash)
		}
		if it.Size != 0 {
			b = append(b, `,"size":`...)
			b = strconv.AppendInt(b, it.Size, 10)
		}
		b = append(b, '}')
	}
	b = append(b, `],"mutations":[`...)
	for i := range v.Mutations {
		o := &v.Mutations[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"clientGroup":`...)
		b = appendString(b, o.ClientGroup)
		b = append(b, `,"client":`...)
		b = appendString(b, o.Client)
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, o.ID, 10)
		b = append(b, `,"name":`...)
		b = appendString(b, o.Name)
		b = append(b, `,"status":`...)
		b = appendString(b, o.Status)
		if o.Error != "" {
			b = append(b, `,"error":`...)
			b = appendString(b, o.Error)
		}
		b = append(b, '}')
	}
	b = append(b, `],"lastIds":{`...)
	for i, client := range sortedKeys(v.LastIDs) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, client)
		b = append(b, ':')
		b = strconv.AppendUint(b, v.LastIDs[client], 10)
	}
	return append(b, "}}"...), nil
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 1 {
		for k := range m {
			return []string{k}
		}
	}
	return slices.Sorted(maps.Keys(m))
}

// appendString appends s as json.Marshal writes it (HTML-escaped).
func appendString(b []byte, s string) []byte { return schemas.AppendJSONString(b, s, true) }

// appendRaw appends a raw JSON value as json.Marshal writes a
// json.RawMessage: compacted and HTML-escaped. Values that need neither,
// which is what Canon's records hold, are copied as they are.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if valid, compact := schemas.CheckJSON(raw); valid && compact && !bytes.ContainsAny(raw, "<>&\u2028\u2029") {
		return append(b, raw...), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	var esc bytes.Buffer
	json.HTMLEscape(&esc, buf.Bytes())
	return append(b, esc.Bytes()...), nil
}
