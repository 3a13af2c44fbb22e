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

// This file holds what the decoders need around the toolkit's walkers
// (json.go): the paths and messages of their errors, the members they
// bind by name, and the conversion of scalar values with errors that name
// the field.

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
	v, _ := JSONString(raw)
	return v, nil
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

// jsonValue is the raw value of a member that is kept as JSON (args,
// meta, a scalar), and whether it is compact.
type jsonValue struct {
	raw     []byte
	compact bool
}

// copy copies the value without insignificant whitespace, which is how
// encoding/json writes a json.RawMessage: decoding an encoding then gives
// back the same bytes.
func (v jsonValue) copy() json.RawMessage {
	if v.compact {
		return bytes.Clone(v.raw)
	}
	var b bytes.Buffer
	b.Grow(len(v.raw))
	_ = json.Compact(&b, v.raw) // raw is valid JSON
	return b.Bytes()
}

// bound is what every members struct shares: the first known member
// that appeared twice. Readers that keep the first and readers that keep
// the last would disagree on it, so it is an error, reported before any
// other of the object.
type bound struct{ dup string }

// set binds val to the member name, whose slot is *dst.
func (b *bound) set(dst *[]byte, name string, val []byte) {
	if *dst != nil && b.dup == "" {
		b.dup = name
	}
	*dst = val
}

// value checks the value at d[at], inside depth objects and arrays, binds
// it to name and returns the index after it, or -1.
func (b *bound) value(dst *[]byte, name string, d []byte, at, depth int) int {
	end, _ := CheckJSONValue(d, at, depth)
	if end >= 0 {
		b.set(dst, name, d[at:end])
	}
	return end
}

// json is value for a member kept as JSON.
func (b *bound) json(dst *jsonValue, name string, d []byte, at, depth int) int {
	end, compact := CheckJSONValue(d, at, depth)
	if end >= 0 {
		b.set(&dst.raw, name, d[at:end])
		dst.compact = compact
	}
	return end
}

// nest is value for a member that holds an object or an array, which
// starts with open: walk reads it, binding what is inside as it checks
// it. A value of another type is bound as it is, for the type error.
func (b *bound) nest(dst *[]byte, name string, d []byte, at, depth int, open byte, walk func(d []byte, at, depth int) (int, bool)) int {
	if at >= len(d) || d[at] != open {
		return b.value(dst, name, d, at, depth)
	}
	end, ok := walk(d, at, depth)
	if !ok {
		return -1
	}
	b.set(dst, name, d[at:end])
	return end
}

// dupErr is the error of a member that appeared twice, or nil.
func (b *bound) dupErr(a at) error {
	if b.dup == "" {
		return nil
	}
	return a.errorf(b.dup, "appears more than once: keep one")
}

// skip checks the value of a member the decoders do not know: they
// ignore it (forward compatibility within a major).
func skip(d []byte, at, depth int) int {
	end, _ := CheckJSONValue(d, at, depth)
	return end
}

// stringsMember binds an array of strings (chunk hashes).
type stringsMember struct {
	raw   []byte
	vals  []string
	bad   []byte // the first element that is not a string
	badAt int
}

func (s *stringsMember) walk(d []byte, at, depth int) (int, bool) {
	s.vals, s.bad = nil, nil
	n := 0
	return JSONElements(d, at, depth, func(at int) int {
		end, _ := CheckJSONValue(d, at, depth+1)
		switch {
		case end < 0 || s.bad != nil:
		case d[at] != '"':
			s.bad, s.badAt = d[at:end], n
		default:
			v, _ := JSONString(d[at:end])
			s.vals = append(s.vals, v)
		}
		n++
		return end
	})
}

// parse reads the array member name, if present.
func (s *stringsMember) parse(c *conv, name string) []string {
	if c.err != nil || s.raw == nil {
		return nil
	}
	if c.err = wantArray(s.raw, c.a, name); c.err != nil {
		return nil
	}
	if s.bad != nil {
		c.err = c.a.errorf(name+"["+strconv.Itoa(s.badAt)+"]", "must be a string, got %s", got(s.bad))
		return nil
	}
	return s.vals
}

// conv converts the bound members of the object at a in declaration
// order and keeps the first error: once there is one, the conversions
// that follow do nothing (the record is refused).
type conv struct {
	a   at
	err error
}

func (c *conv) str(raw []byte, name string, required bool) string {
	if c.err != nil {
		return ""
	}
	s, err := str(raw, c.a, name, required)
	c.err = err
	return s
}

func (c *conv) uint(raw []byte, name string, lo uint64, required bool) uint64 {
	if c.err != nil {
		return 0
	}
	n, err := uintField(raw, c.a, name, lo, required)
	c.err = err
	return n
}

func (c *conv) int(raw []byte, name string, lo, hi int64, required bool) int64 {
	if c.err != nil {
		return 0
	}
	n, err := intField(raw, c.a, name, lo, hi, required)
	c.err = err
	return n
}

// args reads the required args member; missing says what to send.
func (c *conv) args(v jsonValue, missing string) json.RawMessage {
	switch {
	case c.err != nil:
		return nil
	case v.raw == nil:
		c.err = c.a.errorf("args", "is required but missing: %s", missing)
		return nil
	}
	return v.copy()
}

// object starts the conversion of the object member name, bound to raw
// with the members of b. ok is false when there is nothing to convert:
// an error before, raw absent, or raw not an object (an error).
func (c *conv) object(raw []byte, name string, b *bound) (_ conv, ok bool) {
	if c.err != nil || raw == nil {
		return conv{}, false
	}
	if c.err = wantObject(raw, c.a, name); c.err != nil {
		return conv{}, false
	}
	a := c.a.child(name)
	return conv{a: a, err: b.dupErr(a)}, true
}

// collection checks the required member name, an object or an array
// (open) that the walk converted with the first error err; ok is false
// on an error.
func (c *conv) collection(raw []byte, name string, open byte, err error) (ok bool) {
	switch {
	case c.err != nil:
	case raw == nil:
		c.err = c.a.missing(name)
	case open == '{':
		c.err = wantObject(raw, c.a, name)
	default:
		c.err = wantArray(raw, c.a, name)
	}
	if c.err == nil {
		c.err = err
	}
	return c.err == nil
}
