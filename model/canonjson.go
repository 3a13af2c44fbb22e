package model

import (
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// Walking canonical JSON (RFC 8785) text: no whitespace, object members
// sorted by the UTF-16 code units of their names, strings with only the
// mandatory escapes, so that one value has exactly one spelling. Merging a
// small patch into a large body, or splicing a string inside it, then
// costs a copy of the untouched text rather than a decode and an encode
// of the whole. Every input here comes from Canonical (jcs) or from these
// functions; the tests check them against decoding with encoding/json and
// canonicalizing with jcs.

// errNotCanonical reports text that is not canonical JSON: only a body
// the store corrupted, or a bug, gets there.
var errNotCanonical = errors.New("not canonical JSON")

// valueEnd returns the end of the canonical JSON value that starts at b[i].
func valueEnd(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errNotCanonical
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := valueEnd(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
	default: // a number or a literal
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		if j > i {
			return j, nil
		}
	}
	return 0, errNotCanonical
}

// objectIter walks the members of the canonical object that starts at
// b[start], as offsets into b.
type objectIter struct {
	b   []byte
	i   int // the next member's start; -1 when done
	err error
}

func newObjectIter(b []byte, start int) objectIter {
	it := objectIter{b: b, i: start + 1}
	switch {
	case start >= len(b) || b[start] != '{' || it.i >= len(b):
		it.i, it.err = -1, errNotCanonical
	case b[it.i] == '}':
		it.i = -1
	}
	return it
}

// next returns the next member: its name b[ks:ke] (quoted) and its value
// b[vs:ve].
func (it *objectIter) next() (ks, ke, vs, ve int, ok bool) {
	if it.i < 0 {
		return 0, 0, 0, 0, false
	}
	b := it.b
	ks = it.i
	var err error
	if ks >= len(b) || b[ks] != '"' {
		return it.fail()
	}
	if ke, err = valueEnd(b, ks); err != nil || ke >= len(b) || b[ke] != ':' {
		return it.fail()
	}
	vs = ke + 1
	if ve, err = valueEnd(b, vs); err != nil || ve >= len(b) {
		return it.fail()
	}
	switch b[ve] {
	case ',':
		it.i = ve + 1
	case '}':
		it.i = -1
	default:
		return it.fail()
	}
	return ks, ke, vs, ve, true
}

func (it *objectIter) fail() (int, int, int, int, bool) {
	it.i, it.err = -1, errNotCanonical
	return 0, 0, 0, 0, false
}

// arrayIter walks the elements of the canonical array that starts at
// b[start].
type arrayIter struct {
	b   []byte
	i   int
	err error
}

func newArrayIter(b []byte, start int) arrayIter {
	it := arrayIter{b: b, i: start + 1}
	switch {
	case start >= len(b) || b[start] != '[' || it.i >= len(b):
		it.i, it.err = -1, errNotCanonical
	case b[it.i] == ']':
		it.i = -1
	}
	return it
}

func (it *arrayIter) next() (vs, ve int, ok bool) {
	if it.i < 0 {
		return 0, 0, false
	}
	vs = it.i
	ve, err := valueEnd(it.b, vs)
	if err != nil || ve >= len(it.b) {
		it.i, it.err = -1, errNotCanonical
		return 0, 0, false
	}
	switch it.b[ve] {
	case ',':
		it.i = ve + 1
	case ']':
		it.i = -1
	default:
		it.i, it.err = -1, errNotCanonical
		return 0, 0, false
	}
	return vs, ve, true
}

// nextRune decodes the character at s[i] of a JSON string's content.
func nextRune(s []byte, i int) (rune, int) {
	if s[i] != '\\' {
		r, n := utf8.DecodeRune(s[i:])
		return r, i + n
	}
	if i+1 >= len(s) {
		return utf8.RuneError, len(s)
	}
	switch s[i+1] {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		r, ok := hex4(s, i+2)
		if !ok {
			return utf8.RuneError, len(s)
		}
		if utf16.IsSurrogate(r) {
			if lo, ok := hex4(s, i+8); ok && i+7 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				if c := utf16.DecodeRune(r, lo); c != utf8.RuneError {
					return c, i + 12
				}
			}
			return utf8.RuneError, i + 6
		}
		return r, i + 6
	}
	return rune(s[i+1]), i + 2 // \" \\ \/
}

func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// compareNames orders two quoted JSON strings by the UTF-16 code units of
// their contents, the order of members in canonical JSON.
func compareNames(a, b []byte) int {
	a, b = a[1:len(a)-1], b[1:len(b)-1]
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] < utf8.RuneSelf && b[j] < utf8.RuneSelf && a[i] != '\\' && b[j] != '\\' {
			if a[i] != b[j] {
				return int(a[i]) - int(b[j])
			}
			i, j = i+1, j+1
			continue
		}
		ra, ni := nextRune(a, i)
		rb, nj := nextRune(b, j)
		if ra != rb {
			if ua, ub := firstUnit(ra), firstUnit(rb); ua != ub {
				return int(ua - ub)
			}
			// Both outside the BMP with the same high surrogate: the low
			// surrogates order as the characters do.
			return int(ra - rb)
		}
		i, j = ni, nj
	}
	return (len(a) - i) - (len(b) - j)
}

// firstUnit is the first UTF-16 code unit of a character: a character
// outside the BMP (a surrogate pair, 0xD800-0xDBFF first) sorts before
// U+E000-U+FFFF.
func firstUnit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

// decodeString returns the content of a quoted JSON string.
func decodeString(q []byte) string {
	s := q[1 : len(q)-1]
	for _, c := range s {
		if c == '\\' {
			out := make([]byte, 0, len(s))
			for i := 0; i < len(s); {
				var r rune
				r, i = nextRune(s, i)
				out = utf8.AppendRune(out, r)
			}
			return string(out)
		}
	}
	return string(s)
}

// appendString appends s as a canonical JSON string (RFC 8785 3.2.2.2):
// '"', '\' and control characters escaped, the five of them with a short
// form so, the others as \u00xx; every other character as it is. s is
// valid UTF-8.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			} else {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, '"')
}

// maxQuickDepth bounds the nesting that isCanonical walks; deeper text
// goes to jcs.
const maxQuickDepth = 64

// isCanonical reports whether b is canonical JSON as it is, as far as a
// quick walk can tell without decoding: compact, members in order and
// unique, strings with only the escapes jcs writes, and numbers that are
// integers of at most 15 digits (jcs writes any other number through a
// double). False may be canonical text it does not recognize, never the
// reverse: Canonical then asks jcs.
func isCanonical(b []byte) bool {
	end, ok := canonicalEnd(b, 0, 0)
	return ok && end == len(b)
}

// canonicalEnd returns the end of the canonical value that starts at b[i].
func canonicalEnd(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; c {
	case '"':
		return canonicalStringEnd(b, i)
	case '{', '[':
		if depth >= maxQuickDepth {
			return 0, false
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i++
		if i < len(b) && b[i] == closer {
			return i + 1, true
		}
		var prev []byte
		for {
			if c == '{' {
				ks := i
				ke, ok := canonicalStringEnd(b, i)
				if !ok || ke >= len(b) || b[ke] != ':' {
					return 0, false
				}
				if prev != nil && compareNames(prev, b[ks:ke]) >= 0 {
					return 0, false // out of order, or a duplicate
				}
				prev = b[ks:ke]
				i = ke + 1
			}
			end, ok := canonicalEnd(b, i, depth+1)
			if !ok || end >= len(b) {
				return 0, false
			}
			switch b[end] {
			case ',':
				i = end + 1
			case closer:
				return end + 1, true
			default:
				return 0, false
			}
		}
	case 't':
		return literalEnd(b, i, "true")
	case 'f':
		return literalEnd(b, i, "false")
	case 'n':
		return literalEnd(b, i, "null")
	}
	// An integer: no leading zero, not -0, at most 15 digits (below 2^53,
	// so the double jcs goes through writes it back as it is).
	j := i
	if b[j] == '-' {
		j++
	}
	d := j
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	switch n := j - d; {
	case n == 0 || n > 15:
		return 0, false
	case b[d] == '0' && (n > 1 || d > i):
		return 0, false
	case j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']':
		return 0, false // a fraction, an exponent, or not a number
	}
	return j, true
}

func literalEnd(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// canonicalStringEnd returns the end of the string that starts at b[i]
// if it is written as jcs writes it: valid UTF-8, '"' and '\' escaped,
// control characters escaped with the short forms \b \f \n \r \t or as
// \u00xx in lower case, and nothing else escaped.
func canonicalStringEnd(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for j := i + 1; j < len(b); {
		c := b[j]
		switch {
		case c == '"':
			return j + 1, true
		case c == '\\':
			if j+1 >= len(b) {
				return 0, false
			}
			switch b[j+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				r, ok := hex4(b, j+2)
				if !ok || r >= 0x20 || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t' {
					return 0, false
				}
				for _, h := range b[j+2 : j+6] {
					if h >= 'A' && h <= 'F' {
						return 0, false
					}
				}
				j += 6
			default:
				return 0, false
			}
		case c < 0x20:
			return 0, false
		case c < utf8.RuneSelf:
			j++
		default:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n <= 1 {
				return 0, false
			}
			j += n
		}
	}
	return 0, false
}
