package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file holds the decoders' JSON plumbing. A record value is checked
// once with json.Valid; the functions below then walk the known-valid
// bytes without allocating, hand out each member's raw value and convert
// scalar values with errors that name the field. Walking valid JSON only
// needs to track strings and nesting, which is why it is this short.

// at locates an object in a record for error messages: the record itself,
// a nested object ("base", "mutation") or an element of an array
// ("items[3]"). Paths are only formatted when an error is made.
type at struct {
	prefix string
	index  int // >= 0: element index of the array prefix
}

var top = at{index: -1}

func nested(name string) at         { return at{prefix: name, index: -1} }
func element(name string, i int) at { return at{prefix: name, index: i} }

// child locates an object nested in a member of this one.
func (a at) child(name string) at { return nested(a.field(name)) }

// field is the path of a member of the object.
func (a at) field(name string) string {
	if len(name) > 64 { // a map key: a client id, a scalar name
		name = short(name)
	}
	switch {
	case a.prefix == "":
		return name
	case a.index < 0:
		return a.prefix + "." + name
	default:
		return a.prefix + "[" + strconv.Itoa(a.index) + "]." + name
	}
}

// wrap puts a FieldError made by a Validate* function with an empty field
// name at the member name of the object.
func (a at) wrap(name string, err error) error {
	if fe := (*FieldError)(nil); errors.As(err, &fe) {
		c := *fe
		c.Field = a.field(name)
		return &c
	}
	return err
}

func (a at) errorf(name, format string, args ...any) error {
	return &FieldError{Field: a.field(name), Reason: fmt.Sprintf(format, args...)}
}

func (a at) missing(name string) error {
	return &FieldError{Field: a.field(name), Reason: "is required but missing"}
}

// tooLarge is an ErrTooLarge about a field.
func tooLarge[N int | int64](field string, size N, limit int, limitName string) error {
	return &FieldError{
		Field:  field,
		Reason: fmt.Sprintf("too large: %d bytes, over the limit of %d bytes (%s)", size, limit, limitName),
		Err:    ErrTooLarge,
	}
}

// preview is the start of b for an error message.
func preview(b []byte) string {
	const max = 80
	if len(b) <= max {
		return string(b)
	}
	n := max
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}

// jsonType names the type of a valid JSON value for error messages.
func jsonType(raw []byte) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// got describes a wrong value: its type, and the value itself when short.
func got(raw []byte) string {
	t := jsonType(raw)
	switch t {
	case "object", "array":
		return t
	case "null", "boolean", "number":
		return string(raw[:min(len(raw), 40)])
	}
	return "string " + preview(raw)
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

// members calls fn with the key and the raw value of each member of the
// valid JSON object obj, in order.
func members(obj []byte, fn func(key []byte, val []byte) error) error {
	i := skipSpace(obj, 0) + 1 // '{'
	i = skipSpace(obj, i)
	if i >= len(obj) || obj[i] == '}' {
		return nil
	}
	for i < len(obj) {
		ke := endString(obj, i)
		key := obj[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			var s string
			if err := json.Unmarshal(obj[i:ke], &s); err != nil {
				return err // unreachable: obj is valid JSON
			}
			key = []byte(s)
		}
		i = skipSpace(obj, ke) + 1 // ':'
		i = skipSpace(obj, i)
		ve := endValue(obj, i)
		if err := fn(key, obj[i:ve]); err != nil {
			return err
		}
		i = skipSpace(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return nil
		}
		i = skipSpace(obj, i+1)
	}
	return nil
}

// elements calls fn with each element of the valid JSON array arr.
func elements(arr []byte, fn func(i int, val []byte) error) error {
	i := skipSpace(arr, 0) + 1 // '['
	i = skipSpace(arr, i)
	if i >= len(arr) || arr[i] == ']' {
		return nil
	}
	for n := 0; i < len(arr); n++ {
		ve := endValue(arr, i)
		if err := fn(n, arr[i:ve]); err != nil {
			return err
		}
		i = skipSpace(arr, ve)
		if i >= len(arr) || arr[i] != ',' {
			return nil
		}
		i = skipSpace(arr, i+1)
	}
	return nil
}

// fieldSet is the known members of one kind of object, in declaration
// order.
type fieldSet struct {
	names []string
	index map[string]int
}

func newFieldSet(names ...string) *fieldSet {
	fs := &fieldSet{names: names, index: make(map[string]int, len(names))}
	for i, n := range names {
		fs.index[n] = i
	}
	return fs
}

// split puts the raw value of each known member of obj into vals, indexed
// like fs.names, and ignores unknown members (forward compatibility
// within a major). A known member that appears twice is an error: readers
// that keep the first and readers that keep the last would disagree.
func (fs *fieldSet) split(obj []byte, a at, vals [][]byte) error {
	return members(obj, func(key, val []byte) error {
		i, ok := fs.index[string(key)]
		if !ok {
			return nil
		}
		if vals[i] != nil {
			return a.errorf(fs.names[i], "appears more than once: keep one")
		}
		vals[i] = val
		return nil
	})
}

// The typed readers below take the raw value of a member, or nil when the
// member is absent, and return an error naming a.field(name).

func wantObject(raw []byte, a at, name string) error {
	if raw[0] != '{' {
		return a.errorf(name, "must be an object, got %s", got(raw))
	}
	return nil
}

func wantArray(raw []byte, a at, name string) error {
	if raw[0] != '[' {
		return a.errorf(name, "must be an array, got %s", got(raw))
	}
	return nil
}

// unquote converts a raw JSON string. Invalid UTF-8 becomes U+FFFD, as
// with encoding/json.
func unquote(raw []byte) string {
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s)
	}
	var out string
	_ = json.Unmarshal(raw, &out) // raw is a valid JSON string
	return out
}

func str(raw []byte, a at, name string, required bool) (string, error) {
	if raw == nil {
		if required {
			return "", a.missing(name)
		}
		return "", nil
	}
	if string(raw) == "null" && !required {
		return "", a.errorf(name, "must be a string, got null: omit it instead")
	}
	if raw[0] != '"' {
		return "", a.errorf(name, "must be a string, got %s", got(raw))
	}
	return unquote(raw), nil
}

// parseInteger reads a JSON number written as an integer: no fraction and
// no exponent, so that every JSON parser reads the same value (1e3 and 1.0
// are refused although they are integral). ok is false for any other
// value, and for a magnitude over math.MaxUint64.
func parseInteger(raw []byte) (neg bool, mag uint64, ok bool) {
	if raw[0] == '-' {
		neg, raw = true, raw[1:]
	}
	if len(raw) == 0 || len(raw) > 20 {
		return false, 0, false
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false, 0, false
		}
		d := uint64(c - '0')
		if mag > (math.MaxUint64-d)/10 {
			return false, 0, false
		}
		mag = mag*10 + d
	}
	return neg, mag, true
}

// intErr explains why raw is not an integer in [lo, hi].
func intErr(raw []byte, a at, name string, lo, hi string, required bool) error {
	want := "an integer >= " + lo
	if hi != "" {
		want = "an integer from " + lo + " to " + hi
	}
	switch {
	case string(raw) == "null" && !required:
		return a.errorf(name, "must be %s, got null: omit it instead", want)
	case jsonType(raw) == "number" && bytes.ContainsAny(raw, ".eE"):
		return a.errorf(name, "must be %s written without fraction or exponent, got %s", want, got(raw))
	}
	return a.errorf(name, "must be %s, got %s", want, got(raw))
}

// uintField reads an integer in [lo, math.MaxUint64].
func uintField(raw []byte, a at, name string, lo uint64, required bool) (uint64, error) {
	if raw == nil {
		if required {
			return 0, a.missing(name)
		}
		return 0, nil
	}
	neg, v, ok := parseInteger(raw)
	if ok && (!neg || v == 0) && v >= lo {
		return v, nil
	}
	hi := ""
	if !ok && raw[0] >= '0' && raw[0] <= '9' && !bytes.ContainsAny(raw, ".eE") {
		hi = strconv.FormatUint(math.MaxUint64, 10) // overflow
	}
	return 0, intErr(raw, a, name, strconv.FormatUint(lo, 10), hi, required)
}

// intField reads an integer in [lo, hi].
func intField(raw []byte, a at, name string, lo, hi int64, required bool) (int64, error) {
	if raw == nil {
		if required {
			return 0, a.missing(name)
		}
		return 0, nil
	}
	neg, mag, ok := parseInteger(raw)
	var v int64
	switch {
	case !ok:
	case neg && mag <= 1<<63:
		v = int64(-mag) // wraps to math.MinInt64 for 1<<63, as wanted
	case !neg && mag <= math.MaxInt64:
		v = int64(mag)
	default:
		ok = false
	}
	if ok && v >= lo && v <= hi {
		return v, nil
	}
	his := ""
	if hi != math.MaxInt64 || lo != 0 {
		his = strconv.FormatInt(hi, 10)
	}
	return 0, intErr(raw, a, name, strconv.FormatInt(lo, 10), his, required)
}

// rawJSON copies a raw value without insignificant whitespace, which is
// how encoding/json writes a json.RawMessage: decoding an encoding then
// gives back the same bytes.
func rawJSON(raw []byte) json.RawMessage {
	if compact(raw) {
		return bytes.Clone(raw)
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	_ = json.Compact(&b, raw) // raw is valid JSON
	return b.Bytes()
}

// compact reports whether the valid JSON raw has no whitespace outside
// its strings.
func compact(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			i = endString(raw, i) - 1
		case ' ', '\t', '\r', '\n':
			return false
		}
	}
	return true
}
