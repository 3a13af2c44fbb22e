package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/canon-sync/canon/schemas"
)

// args are a mutation's arguments: a JSON object, canonicalized once, and
// checked against the fields a mutator knows, so that a typo is an error
// rather than a silently ignored field. Every value is canonical JSON.
type args []argMember

type argMember struct {
	name []byte // quoted, as in the canonical text
	val  []byte
}

func argErr(field, format string, a ...any) error {
	return &schemas.FieldError{Field: "args." + field, Reason: fmt.Sprintf(format, a...)}
}

// parseArgs canonicalizes args that must be a JSON object with only the
// given fields (plain ASCII names, which JSON never escapes).
func parseArgs(raw json.RawMessage, fields ...string) (args, error) {
	if firstByte(raw) != '{' {
		return nil, &schemas.FieldError{Field: "args", Reason: fmt.Sprintf("must be a JSON object with the fields %s", strings.Join(fields, ", "))}
	}
	if a, ok := quickArgs(raw, fields); ok {
		return a, nil
	}
	canon, err := Canonical(raw)
	if err != nil {
		return nil, &schemas.FieldError{Field: "args", Reason: err.Error()}
	}
	a := make(args, 0, len(fields))
	var unknown error
	_, ok := schemas.JSONMemberSpans(canon, 0, 0, func(ks, ke, vs int) int {
		ve, err := valueEnd(canon, vs, 1)
		if err != nil {
			return -1
		}
		m := argMember{name: canon[ks:ke], val: canon[vs:ve]}
		if !knownField(m.name[1:len(m.name)-1], fields) {
			// Members come in canonical order: the same one is reported on
			// every run.
			unknown = argErr(decodeString(m.name), "unknown field (known: %s)", strings.Join(fields, ", "))
			return -1
		}
		a = append(a, m)
		return ve
	})
	switch {
	case unknown != nil:
		return nil, unknown
	case !ok:
		return nil, &schemas.FieldError{Field: "args", Reason: errNotCanonical.Error()}
	}
	return a, nil
}

// quickArgs is parseArgs for the common args: an object, with or
// without whitespace between its members, in any order, whose members are
// distinct known fields with canonical values. It returns the members
// sorted, which is what parseArgs finds in the canonical form, without
// canonicalizing the whole; the values alias raw. ok is false for any
// other args (unknown or repeated fields included), which parseArgs then
// canonicalizes and checks in full.
func quickArgs(raw []byte, fields []string) (a args, ok bool) {
	i := schemas.SkipJSONSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	a = make(args, 0, len(fields))
	if i = schemas.SkipJSONSpace(raw, i+1); i < len(raw) && raw[i] == '}' {
		return a, schemas.SkipJSONSpace(raw, i+1) == len(raw)
	}
	for {
		ks := i
		ke, ok := canonicalStringEnd(raw, ks)
		if !ok || !knownField(raw[ks+1:ke-1], fields) {
			return nil, false
		}
		if i = schemas.SkipJSONSpace(raw, ke); i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		vs := schemas.SkipJSONSpace(raw, i+1)
		ve, ok := canonicalEnd(raw, vs, 1)
		if !ok {
			return nil, false
		}
		// Insert in order: field names are plain ASCII, ordered as bytes.
		m := argMember{name: raw[ks:ke], val: raw[vs:ve]}
		j := len(a)
		for j > 0 && string(a[j-1].name) > string(m.name) {
			j--
		}
		if j > 0 && string(a[j-1].name) == string(m.name) {
			return nil, false // a repeated field: jcs reports it
		}
		a = slices.Insert(a, j, m)
		if i = schemas.SkipJSONSpace(raw, ve); i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = schemas.SkipJSONSpace(raw, i+1)
		case '}':
			return a, schemas.SkipJSONSpace(raw, i+1) == len(raw)
		default:
			return nil, false
		}
	}
}

func knownField(name []byte, fields []string) bool {
	for _, f := range fields {
		if string(name) == f {
			return true
		}
	}
	return false
}

// get returns a field's canonical value; ok is false when it is absent.
func (a args) get(field string) (json.RawMessage, bool) {
	for _, m := range a {
		if string(m.name[1:len(m.name)-1]) == field {
			return m.val, true
		}
	}
	return nil, false
}

// str returns a string field; ok is false when it is absent.
func (a args) str(field string) (s string, ok bool, err error) {
	raw, ok := a.get(field)
	if !ok {
		return "", false, nil
	}
	if raw[0] != '"' {
		return "", true, argErr(field, "must be a string, not %s", jsonKind(raw))
	}
	return decodeString(raw), true, nil
}

// uint returns a non-negative integer field; ok is false when it is
// absent. As in JavaScript, 1.0 is the integer 1.
func (a args) uint(field string) (n int64, ok bool, err error) {
	raw, ok := a.get(field)
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		return 0, true, argErr(field, "must be an integer >= 0, not %s", truncate(string(raw), 40))
	}
	return n, true, nil
}

// target returns the collection and id fields, both required and valid.
func (a args) target() (collection, id string, err error) {
	collection, ok, err := a.str("collection")
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", "", argErr("collection", "is required")
	}
	if err := schemas.ValidateCollection("args.collection", collection); err != nil {
		return "", "", err
	}
	id, ok, err = a.str("id")
	if err != nil {
		return "", "", err
	}
	if !ok {
		return "", "", argErr("id", "is required")
	}
	if err := schemas.ValidateItemID("args.id", id); err != nil {
		return "", "", err
	}
	return collection, id, nil
}

// jsonKind names the type of a JSON text by its first byte.
func jsonKind(raw []byte) string {
	switch firstByte(raw) {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case 0:
		return "nothing"
	}
	return "a number"
}

// truncate shortens s to at most n bytes (n >= 3), cutting on a rune
// boundary and marking the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n -= len("…")
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
