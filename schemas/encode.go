package schemas

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// The ingest encodes every pushed mutation, so EncodeMutation writes the
// record by hand instead of through encoding/json's reflection: the same
// bytes as marshal(&m) (members in declaration order, omitempty, HTML
// characters left as they are), with the args checked and compacted in
// one pass.

// appendMutation appends the mutation/v1 value of m, which
// validateMutation accepted without checking its args' JSON. ok is false
// when the args are not JSON. With argsChecked, the args are known to be
// compact JSON and copied as they are.
func appendMutation(b []byte, m *Mutation, argsChecked bool) (_ []byte, ok bool) {
	b = append(b, `{"org":`...)
	b = appendString(b, m.Org)
	b = append(b, `,"project":`...)
	b = appendString(b, m.Project)
	b = append(b, `,"branch":`...)
	b = appendString(b, m.Branch)
	b = append(b, `,"clientGroup":`...)
	b = appendString(b, m.ClientGroup)
	b = append(b, `,"client":`...)
	b = appendString(b, m.Client)
	b = append(b, `,"id":`...)
	b = strconv.AppendUint(b, m.ID, 10)
	b = append(b, `,"name":`...)
	b = appendString(b, m.Name)
	b = append(b, `,"args":`...)
	switch {
	case len(m.Args) == 0:
		b = append(b, "null"...)
	case argsChecked:
		b = append(b, m.Args...)
	default:
		// What encoding/json does with a json.RawMessage: check it and
		// drop insignificant whitespace.
		buf := bytes.NewBuffer(b)
		if json.Compact(buf, m.Args) != nil {
			return nil, false
		}
		b = buf.Bytes()
	}
	if m.TS != 0 {
		b = append(b, `,"ts":`...)
		b = strconv.AppendInt(b, m.TS, 10)
	}
	if m.Principal != "" {
		b = append(b, `,"principal":`...)
		b = appendString(b, m.Principal)
	}
	if m.ReceivedAt != 0 {
		b = append(b, `,"receivedAt":`...)
		b = strconv.AppendInt(b, m.ReceivedAt, 10)
	}
	// Only jobs send these, rarely: encoding/json writes them.
	if m.Job != nil {
		j, err := marshal(m.Job)
		if err != nil {
			return nil, false
		}
		b = append(append(b, `,"job":`...), j...)
	}
	if m.Origin != nil {
		o, err := marshal(m.Origin)
		if err != nil {
			return nil, false
		}
		b = append(append(b, `,"origin":`...), o...)
	}
	return append(b, '}'), true
}

// appendString appends s as a JSON string the way marshal writes it
// (without HTML escaping).
func appendString(b []byte, s string) []byte { return AppendJSONString(b, s, false) }
