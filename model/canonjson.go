package model

import (
	"errors"
	"unicode/utf8"

	"github.com/canon-sync/canon/schemas"
)

// What is particular to canonical JSON (RFC 8785) text: no whitespace,
// object members sorted by the UTF-16 code units of their names, strings
// with only the mandatory escapes, so that one value has exactly one
// spelling. Merging a small patch into a large body, or splicing a string
// inside it, then costs a copy of the untouched text rather than a decode
// and an encode of the whole. The text is walked with the toolkit of
// schemas (JSONMemberSpans hands out names as written, which compare as
// bytes); what is here is the member order, the spelling of strings and
// numbers, and the check that text is canonical. Every input comes from
// Canonical (jcs) or from these functions; the tests check them against
// decoding with encoding/json and canonicalizing with jcs.

// errNotCanonical reports text that is not canonical JSON: only a body
// the store corrupted, or a bug, gets there.
var errNotCanonical = errors.New("not canonical JSON")

// valueEnd returns the end of the canonical JSON value that starts at
// b[i], inside depth objects and arrays.
func valueEnd(b []byte, i, depth int) (int, error) {
	end, _ := schemas.CheckJSONValue(b, i, depth)
	if end < 0 {
		return 0, errNotCanonical
	}
	return end, nil
}

// compareNames orders two quoted JSON strings by the UTF-16 code units of
// their contents, the order of members in canonical JSON.
func compareNames(a, b []byte) int {
	a, b = a[1:len(a)-1], b[1:len(b)-1]
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if ca == '\\' || cb == '\\' {
			// An escape, rare in canonical names (a control character, '"'
			// or '\\'): compare the decoded rest.
			return compareUTF16(unquote(a[i:]), unquote(b[j:]))
		}
		if ca < utf8.RuneSelf && cb < utf8.RuneSelf {
			if ca != cb {
				return int(ca) - int(cb)
			}
			i, j = i+1, j+1
			continue
		}
		ra, na := utf8.DecodeRune(a[i:])
		rb, nb := utf8.DecodeRune(b[j:])
		if ra != rb {
			return compareRunes(ra, rb)
		}
		i, j = i+na, j+nb
	}
	return (len(a) - i) - (len(b) - j)
}

// unquote decodes the content of a JSON string.
func unquote(content []byte) string {
	q := make([]byte, 0, len(content)+2)
	return decodeString(append(append(append(q, '"'), content...), '"'))
}

// decodeString returns the content of a quoted JSON string.
func decodeString(q []byte) string {
	s, _ := schemas.JSONString(q)
	return s
}

// compareUTF16 orders two strings by their UTF-16 code units.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return compareRunes(ra, rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// compareRunes orders two different characters by their UTF-16 code
// units.
func compareRunes(ra, rb rune) int {
	if ua, ub := firstUnit(ra), firstUnit(rb); ua != ub {
		return int(ua - ub)
	}
	// Both outside the BMP with the same high surrogate: the low
	// surrogates order as the characters do.
	return int(ra - rb)
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

// appendString appends s as a canonical JSON string (RFC 8785 3.2.2.2).
// s is valid UTF-8.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	return append(appendEscaped(dst, s), '"')
}

// appendEscaped appends the inside of appendString's string: s without
// the quotes.
func appendEscaped(dst []byte, s string) []byte {
	return schemas.AppendCanonicalJSONEscaped(dst, s)
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
// It walks by itself rather than with the toolkit's walkers: canonical
// text has no whitespace to skip, and checking names and strings in their
// one spelling as it goes reads each byte once (the walkers check them as
// JSON first, which made this check half as fast again).
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
				// \u00xx in lower case, for a control character
				// without a short form.
				if j+5 >= len(b) || b[j+2] != '0' || b[j+3] != '0' || b[j+4] != '0' && b[j+4] != '1' {
					return 0, false
				}
				switch h := b[j+5]; {
				case h >= '0' && h <= '9', h >= 'a' && h <= 'f':
				default:
					return 0, false
				}
				switch string(b[j+4 : j+6]) {
				case "08", "09", "0a", "0c", "0d": // \b \t \n \f \r
					return 0, false
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
