package wire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode/utf8"
)

// CheckUTF8 refuses a push body (Canon's, Replicache's, or a push message
// of the websocket) that holds bytes that are not UTF-8, naming the field
// that holds them. JSON text is UTF-8 (RFC 8259), and the decoders would
// not refuse it: they turn such bytes into U+FFFD in clientGroup and
// client, so that two different byte strings became one client, and keep
// them in args, whose record the sequencer then drops as undecodable
// after the push was acknowledged.
func CheckUTF8(body []byte) *Error {
	if utf8.Valid(body) {
		return nil
	}
	// The error path only: decode the fields raw to find the one at fault.
	var raw struct {
		Branch        json.RawMessage `json:"branch"`
		ClientGroup   json.RawMessage `json:"clientGroup"`
		ClientGroupID json.RawMessage `json:"clientGroupID"`
		Mutations     []struct {
			Client   json.RawMessage `json:"client"`
			ClientID json.RawMessage `json:"clientID"`
			Name     json.RawMessage `json:"name"`
			Args     json.RawMessage `json:"args"`
		} `json:"mutations"`
	}
	if json.Unmarshal(body, &raw) == nil {
		fields := []RawField{{"branch", raw.Branch}, {"clientGroup", raw.ClientGroup}, {"clientGroupID", raw.ClientGroupID}}
		for i, m := range raw.Mutations {
			at := fmt.Sprintf("mutations[%d].", i)
			fields = append(fields, RawField{at + "client", m.Client}, RawField{at + "clientID", m.ClientID},
				RawField{at + "name", m.Name}, RawField{at + "args", m.Args})
		}
		if aerr := FirstNotUTF8(fields); aerr != nil {
			return aerr
		}
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeMalformed,
		Message: fmt.Sprintf("the body is not valid UTF-8 (at byte %d): JSON text is UTF-8", invalidAt(body)),
		Hint:    "send the body as UTF-8"}
}

// CheckReplicacheMutationUTF8 is CheckUTF8 for the i-th mutation of a
// Replicache push, which is decoded as it arrives rather than whole.
func CheckReplicacheMutationUTF8(i int, raw []byte) *Error {
	if utf8.Valid(raw) {
		return nil
	}
	var m struct {
		ClientID json.RawMessage `json:"clientID"`
		Name     json.RawMessage `json:"name"`
		Args     json.RawMessage `json:"args"`
	}
	at := fmt.Sprintf("mutations[%d].", i)
	if json.Unmarshal(raw, &m) == nil {
		if aerr := FirstNotUTF8([]RawField{{at + "clientID", m.ClientID}, {at + "name", m.Name}, {at + "args", m.Args}}); aerr != nil {
			return aerr
		}
	}
	return notUTF8(fmt.Sprintf("mutations[%d]", i), invalidAt(raw))
}

// RawField is a field's raw JSON and its name in an error answer.
type RawField struct {
	Name  string
	Value []byte
}

// FirstNotUTF8 refuses the first field that holds bytes that are not
// UTF-8; nil if none does.
func FirstNotUTF8(fields []RawField) *Error {
	for _, f := range fields {
		if n := invalidAt(f.Value); n >= 0 {
			return notUTF8(f.Name, n)
		}
	}
	return nil
}

func notUTF8(field string, n int) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalid, Field: field,
		Message: fmt.Sprintf("is not valid UTF-8 (byte %d of the field's JSON)", n),
		Hint:    `send text as UTF-8: JSON is UTF-8, and a string may escape any character as \uXXXX`}
}

// invalidAt is the index of the first byte of b that is not UTF-8, or -1.
func invalidAt(b []byte) int {
	for n := 0; n < len(b); {
		r, size := utf8.DecodeRune(b[n:])
		if r == utf8.RuneError && size <= 1 {
			return n
		}
		n += size
	}
	return -1
}
