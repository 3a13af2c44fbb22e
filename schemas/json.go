// This file is Canon's one byte-level JSON toolkit: it checks, reads and
// writes JSON without reflection. CheckJSON accepts exactly what
// json.Valid accepts, and the walkers (JSONMembers, JSONMembersUnescaped,
// JSONMemberSpans, JSONElements) check the JSON the same way as they go,
// so that a body is read in one pass. Its users:
//
//   - this package's record decoders (parse.go), which bind members by
//     name as they walk, and its mutation encoder (encode.go);
//   - the wire codecs: the producer's push decoding and answers, the Go
//     client's codecs, the websocket's version messages; they handle the
//     common case with it and leave everything else, errors included, to
//     encoding/json, so that results and messages stay encoding/json's;
//   - model, for canonical text (RFC 8785): merge patch, splice and
//     mutator args walk with JSONMemberSpans, which hands out names as
//     written (its check that text is canonical reads it in one pass of
//     its own, which is faster on text without whitespace), and the
//     decider checks args with ValidJSON;
//   - store, which writes the scalar names of its version records.
//
// It was measured against go-json-experiment/json/jsontext: that takes
// about twice as long to check and walk records and pushes, and quotes
// strings otherwise than encoding/json. It lives in schemas, which
// imports nothing of Canon's, so that every package can use it.

package schemas

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

// CheckJSON reports whether d is valid JSON, as json.Valid does, and whether
// it is also compact: without whitespace outside strings, so that
// json.Compact would leave it as it is.
func CheckJSON(d []byte) (valid, compact bool) {
	i := SkipJSONSpace(d, 0)
	end, compact := CheckJSONValue(d, i, 0)
	if end < 0 || SkipJSONSpace(d, end) != len(d) {
		return false, false
	}
	return true, compact && i == 0 && end == len(d)
}

// ValidJSON is json.Valid, several times faster.
func ValidJSON(d []byte) bool {
	valid, _ := CheckJSON(d)
	return valid
}

// CheckJSONValue checks the JSON value that starts at d[i], inside depth
// objects and arrays, as json.Valid checks it inside the JSON around it
// (encoding/json limits the nesting), and returns the index after it and
// whether it is compact; end is -1 when it is not valid.
func CheckJSONValue(d []byte, i, depth int) (end int, compact bool) {
	var buf [32]byte
	stack := buf[:0] // the open objects and arrays: '{' or '['
	spaced := false  // whitespace seen outside strings
	for {
		// A value starts at d[i].
		if i >= len(d) {
			return -1, false
		}
		switch c := d[i]; c {
		case '{', '[':
			if depth+len(stack) >= maxDepth {
				return -1, false
			}
			i++
			if j := SkipJSONSpace(d, i); j != i {
				i, spaced = j, true
			}
			if i < len(d) && d[i] == c+2 { // '}' or ']'
				i++
				break
			}
			stack = append(stack, c)
			if c == '{' {
				if i = memberValue(d, i, &spaced); i < 0 {
					return -1, false
				}
			}
			continue
		case '"':
			if i = endValidString(d, i); i < 0 {
				return -1, false
			}
		case 't':
			if i = literal(d, i, "true"); i < 0 {
				return -1, false
			}
		case 'f':
			if i = literal(d, i, "false"); i < 0 {
				return -1, false
			}
		case 'n':
			if i = literal(d, i, "null"); i < 0 {
				return -1, false
			}
		default:
			if i = endNumber(d, i); i < 0 {
				return -1, false
			}
		}
		// After a value: close what ends here, then the next member or
		// element, or the end of the value.
		for {
			if len(stack) == 0 {
				return i, !spaced
			}
			if j := SkipJSONSpace(d, i); j != i {
				i, spaced = j, true
			}
			if i >= len(d) {
				return -1, false
			}
			open := stack[len(stack)-1]
			if d[i] == open+2 {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if d[i] != ',' {
				return -1, false
			}
			i++
			if j := SkipJSONSpace(d, i); j != i {
				i, spaced = j, true
			}
			if open == '{' {
				if i = memberValue(d, i, &spaced); i < 0 {
					return -1, false
				}
			}
			break
		}
	}
}

// JSONMembers walks the object that starts at d[i], inside depth objects and
// arrays, checking its JSON as CheckJSONValue does, and returns the index
// after it. fn gets each key and the index where its value starts; it
// checks and reads the value (with CheckJSONValue at depth+1, or JSONMembers or
// JSONElements at depth+1) and returns the index after it, or -1 to stop the
// walk: then ok is false, as when the JSON is not valid or a key has an
// escape (it may spell a known name).
func JSONMembers(d []byte, i, depth int, fn func(key []byte, at int) int) (end int, ok bool) {
	return JSONMemberSpans(d, i, depth, func(ks, ke, at int) int {
		key := d[ks+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return -1
		}
		return fn(key, at)
	})
}

// JSONMembersUnescaped is JSONMembers for a reader that takes keys with
// escapes: fn gets such a key decoded (a rare case, which allocates).
func JSONMembersUnescaped(d []byte, i, depth int, fn func(key []byte, at int) int) (end int, ok bool) {
	return JSONMemberSpans(d, i, depth, func(ks, ke, at int) int {
		key := d[ks+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			s, _ := JSONString(d[ks:ke])
			key = []byte(s)
		}
		return fn(key, at)
	})
}

// JSONMemberSpans is JSONMembers for a reader of text that spells each
// name one way (canonical JSON), where names compare and copy as bytes,
// or that checks where the walk skipped whitespace: fn gets each key as
// written, d[ks:ke] with its quotes and escapes, and the index where its
// value starts.
func JSONMemberSpans(d []byte, i, depth int, fn func(ks, ke, at int) int) (end int, ok bool) {
	if i >= len(d) || d[i] != '{' || depth >= maxDepth {
		return 0, false
	}
	i = SkipJSONSpace(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return 0, false
		}
		ks, ke := i, endValidString(d, i)
		if ke < 0 {
			return 0, false
		}
		i = SkipJSONSpace(d, ke)
		if i >= len(d) || d[i] != ':' {
			return 0, false
		}
		if i = fn(ks, ke, SkipJSONSpace(d, i+1)); i < 0 {
			return 0, false
		}
		i = SkipJSONSpace(d, i)
		switch {
		case i >= len(d):
			return 0, false
		case d[i] == '}':
			return i + 1, true
		case d[i] != ',':
			return 0, false
		}
		i = SkipJSONSpace(d, i+1)
	}
}

// JSONElements walks the array that starts at d[i] as JSONMembers walks an
// object: fn gets the index where each element starts.
func JSONElements(d []byte, i, depth int, fn func(at int) int) (end int, ok bool) {
	if i >= len(d) || d[i] != '[' || depth >= maxDepth {
		return 0, false
	}
	i = SkipJSONSpace(d, i+1)
	if i < len(d) && d[i] == ']' {
		return i + 1, true
	}
	for {
		if i = fn(i); i < 0 {
			return 0, false
		}
		i = SkipJSONSpace(d, i)
		switch {
		case i >= len(d):
			return 0, false
		case d[i] == ']':
			return i + 1, true
		case d[i] != ',':
			return 0, false
		}
		i = SkipJSONSpace(d, i+1)
	}
}

// memberValue checks the key and colon of an object member at d[i] and
// returns where its value starts, or -1.
func memberValue(d []byte, i int, spaced *bool) int {
	if i >= len(d) || d[i] != '"' {
		return -1
	}
	if i = endValidString(d, i); i < 0 {
		return -1
	}
	if j := SkipJSONSpace(d, i); j != i {
		i, *spaced = j, true
	}
	if i >= len(d) || d[i] != ':' {
		return -1
	}
	i++
	if j := SkipJSONSpace(d, i); j != i {
		i, *spaced = j, true
	}
	return i
}

// plain marks the bytes a JSON string holds as they are: not a control
// character, a quote or a backslash. Bytes of invalid UTF-8 are plain, as
// for json.Valid.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// endValidString checks the string that starts at d[i] and returns the
// index after it, or -1.
func endValidString(d []byte, i int) int {
	for i++; i < len(d); {
		c := d[i]
		if plain[c] {
			i++
			continue
		}
		switch c {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(d) {
				return -1
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+5 >= len(d) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) || !isHex(d[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default:
			return -1 // a control character
		}
	}
	return -1
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func literal(d []byte, i int, lit string) int {
	if len(d)-i < len(lit) || string(d[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// endNumber checks the number that starts at d[i] (RFC 8259: no leading
// zeros, no plus sign, digits on both sides of the point) and returns the
// index after it, or -1.
func endNumber(d []byte, i int) int {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i+1)
	default:
		return -1
	}
	if i < len(d) && d[i] == '.' {
		if i+1 >= len(d) || !isDigit(d[i+1]) {
			return -1
		}
		i = digits(d, i+1)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return -1
		}
		i = digits(d, i)
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digits(d []byte, i int) int {
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i
}

// SkipJSONSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipJSONSpace(d []byte, i int) int {
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

// JSONString decodes a string value as encoding/json does (escapes,
// invalid UTF-8 and lone surrogates as U+FFFD); ok is false when val is
// not a string. val is valid JSON.
func JSONString(val []byte) (s string, ok bool) {
	if val[0] != '"' {
		return "", false
	}
	raw := val[1 : len(val)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), true
	}
	return string(appendUnquoted(make([]byte, 0, len(raw)), raw)), true
}

// appendUnquoted appends the content s of a valid JSON string, decoded.
func appendUnquoted(b, s []byte) []byte {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\':
			switch e := s[i+1]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) { // half of a pair \uD8xx\uDCxx, or alone
					lo := rune(-1)
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						lo = hex4(s[i+2:])
					}
					if r = utf16.DecodeRune(r, lo); r != utf8.RuneError {
						i += 6
					}
				}
				b = utf8.AppendRune(b, r)
				continue
			default: // " \ /
				b = append(b, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, "\uFFFD"...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n
		}
	}
	return b
}

// hex4 reads the four hex digits at the start of s, or returns -1.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// JSONStringLike is JSONString that returns prev, without allocating, when val
// decodes to it: the client and mutator names of a push mostly repeat.
func JSONStringLike(val []byte, prev string) (s string, ok bool) {
	if len(val) >= 2 && val[0] == '"' && string(val[1:len(val)-1]) == prev && bytes.IndexByte(val, '\\') < 0 && utf8.ValidString(prev) {
		return prev, true
	}
	return JSONString(val)
}

// JSONUint decodes a number into an unsigned integer of bitSize bits as
// encoding/json does; ok is false for anything encoding/json refuses or
// decodes differently: a sign, a fraction, an exponent, an overflow,
// another type.
func JSONUint(val []byte, bitSize int) (n uint64, ok bool) {
	if !isDigit(val[0]) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(val), 10, bitSize)
	return n, err == nil
}

// JSONInt decodes a number into a signed integer of bitSize bits as
// encoding/json does; ok is false as for JSONUint.
func JSONInt(val []byte, bitSize int) (n int64, ok bool) {
	if val[0] != '-' && !isDigit(val[0]) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(val), 10, bitSize)
	return n, err == nil
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string the way encoding/json writes
// it, with or without HTML escaping (json.Marshal escapes <, > and & as
// \u003c, \u003e and \u0026; an Encoder may not). Like encoding/json it
// escapes U+2028 and U+2029 either way and writes invalid UTF-8 as
// U+FFFD.
func AppendJSONString(b []byte, s string, escapeHTML bool) []byte {
	e := escapeEncoder
	if escapeHTML {
		e = escapeMarshal
	}
	b = append(b, '"')
	return append(appendEscaped(b, s, e), '"')
}

// AppendCanonicalJSONEscaped appends the inside of s's canonical JSON
// string (RFC 8785 3.2.2.2), without the quotes: only '"', '\\' and the
// control characters escaped (the five with a short form so, the others as
// \u00xx), every other character as it is. s must be valid UTF-8.
func AppendCanonicalJSONEscaped(b []byte, s string) []byte {
	return appendEscaped(b, s, escapeCanonical)
}

// escaping is how appendEscaped writes a string.
type escaping uint8

const (
	escapeEncoder   escaping = iota // an Encoder without HTML escaping
	escapeMarshal                   // json.Marshal: also <, > and &
	escapeCanonical                 // RFC 8785: the mandatory escapes only
)

// appendEscaped appends the inside of s's JSON string written as e says.
// Runs of characters that need no escape are copied at once.
func appendEscaped(b []byte, s string, e escaping) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (e != escapeMarshal || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		if e == escapeCanonical {
			i++ // valid UTF-8, written as it is
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(b, s[start:]...)
}
