package model

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/canon-sync/canon/schemas"
)

// spliceJSON replaces, in the string found at an RFC 6901 JSON pointer of
// a canonical JSON document, del UTF-16 code units at index by insert, and
// returns the canonical document. Counting in UTF-16 code units is what
// JavaScript strings do, so a JS client's String.prototype indices apply
// unchanged. Only the target string is decoded and encoded again.
func spliceJSON(doc []byte, pointer string, index, del int64, insert string) ([]byte, error) {
	tokens, err := parsePointer(pointer)
	if err != nil {
		return nil, err
	}
	// end is -1 when the target is a string whose end is not looked for:
	// the splice walks it only up to the edit.
	start, end := 0, len(doc)
	for i, tok := range tokens {
		at := func() string { return pointerPrefix(tokens[:i+1]) }
		last := i == len(tokens)-1
		switch doc[start] {
		case '{':
			name := appendString(nil, tok) // one spelling: compare the bytes
			found := false
			_, ok := schemas.JSONMemberSpans(doc, start, i, func(ks, ke, vs int) int {
				match := bytes.Equal(doc[ks:ke], name)
				if match && last && doc[vs] == '"' {
					start, end, found = vs, -1, true
					return -1 // stop here
				}
				ve, err := valueEnd(doc, vs, i+1)
				if err != nil {
					return -1
				}
				if match {
					start, end, found = vs, ve, true
					return -1 // stop here
				}
				return ve
			})
			if !found && !ok {
				return nil, errNotCanonical
			}
			if !found {
				return nil, fmt.Errorf("path %q: no member %q", at(), tok)
			}
		case '[':
			n, isIndex := arrayIndex(tok)
			count, found := 0, false
			_, ok := schemas.JSONElements(doc, start, i, func(vs int) int {
				match := isIndex && count == n
				if match && last && doc[vs] == '"' {
					start, end, found = vs, -1, true
					return -1 // stop here
				}
				ve, err := valueEnd(doc, vs, i+1)
				if err != nil {
					return -1
				}
				if match {
					start, end, found = vs, ve, true
					return -1 // stop here
				}
				count++
				return ve
			})
			if !found && !ok {
				return nil, errNotCanonical
			}
			if !found {
				return nil, fmt.Errorf("path %q: %q is not an index of an array of %d elements", at(), tok, count)
			}
		default:
			return nil, fmt.Errorf("path %q: cannot go into %s", at(), jsonKind(doc[start:end]))
		}
	}
	where := "data"
	if pointer != "" {
		where = fmt.Sprintf("data at path %q", pointer)
	}
	if doc[start] != '"' {
		return nil, fmt.Errorf("%s: the target is %s, not a string", where, jsonKind(doc[start:end]))
	}
	if utf8.ValidString(insert) {
		// The edit is made in the text as it is written: the string is
		// neither decoded nor encoded again, and the document is copied
		// once. A large body spliced a few characters costs a pass over
		// the string up to the edit and one copy.
		from, to, ok, err := spliceOffsets(doc[start:], index, del)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if ok {
			out := make([]byte, 0, len(doc)-(to-from)+len(insert)+16)
			out = append(out, doc[:start+from]...)
			out = appendEscaped(out, insert)
			return append(out, doc[start+to:]...), nil
		}
	}
	if end < 0 {
		var err error
		if end, err = valueEnd(doc, start, len(tokens)); err != nil {
			return nil, err
		}
	}
	return spliceDecoded(doc, start, end, index, del, insert, where)
}

// spliceDecoded splices the string doc[start:end] by decoding it and
// encoding the result: for the text spliceOffsets does not walk.
func spliceDecoded(doc []byte, start, end int, index, del int64, insert, where string) ([]byte, error) {
	spliced, err := spliceUTF16(decodeString(doc[start:end]), index, del, insert)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	out := make([]byte, 0, len(doc)-(end-start)+len(spliced)+16)
	out = append(out, doc[:start]...)
	out = appendString(out, spliced)
	return append(out, doc[end:]...), nil
}

// spliceOffsets is spliceUTF16 on a canonical JSON string as it is
// written (q from its opening quote; the string ends at the first quote
// that is not escaped, and q may go on after it): it returns the byte
// offsets in q of the UTF-16 offsets index and index+del, and the same
// errors as spliceUTF16. An escape counts as the one character it stands
// for. The string is walked only up to index+del when the splice is
// valid. ok is false, with no error, for text that is not written as
// Canonical writes strings (invalid UTF-8, an escape jcs does not write,
// no closing quote): the caller then decodes the string.
func spliceOffsets(q []byte, index, del int64) (from, to int, ok bool, err error) {
	if index < 0 || del < 0 {
		return 0, 0, true, fmt.Errorf("index and delete must not be negative")
	}
	if len(q) < 2 || q[0] != '"' {
		return 0, 0, false, nil
	}
	n := len(q) // the closing quote, once found
	closed := false
	last := index + del
	from, to = -1, -1
	cutAt := [2]bool{} // index, index+del inside a surrogate pair
	var u int64        // UTF-16 offset of the character at byte i
walk:
	for i := 1; i < n; {
		if u == index {
			from = i
		}
		if u == last {
			to = i
			break
		}
		// A run of plain ASCII is as many UTF-16 code units as bytes.
		if r := plainRun(q[i:n]); r > 0 {
			if index > u && index < u+int64(r) {
				from = i + int(index-u)
			}
			if last > u && last < u+int64(r) {
				to = i + int(last-u)
				break
			}
			u += int64(r)
			i += r
			continue
		}
		size, w := 1, int64(1)
		switch c := q[i]; {
		case c == '\\':
			size = escapeSize(q[i:n])
			if size == 0 {
				return 0, 0, false, nil
			}
		case c == '"':
			n, closed = i, true
			break walk
		case c < 0x20:
			return 0, 0, false, nil
		case c >= utf8.RuneSelf:
			r, sz := utf8.DecodeRune(q[i:n])
			if r == utf8.RuneError && sz <= 1 {
				return 0, 0, false, nil
			}
			size = sz
			if r >= 0x10000 {
				w = 2
			}
		}
		if u < index && index < u+w {
			cutAt[0] = true
		}
		if u < last && last < u+w {
			cutAt[1] = true
		}
		u += w
		i += size
	}
	if to < 0 && !closed {
		return 0, 0, false, nil
	}
	from, to, err = walkEnd(index, del, u, from, to, n, cutAt)
	return from, to, true, err
}

// plainRun is the length of the run of bytes at the start of b that
// canonical JSON writes as they are and that are one UTF-16 code unit
// each: ASCII but control characters, '"' and '\\'. It tests 8 bytes at
// a time.
func plainRun(b []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	zero := func(v uint64) uint64 { return (v - ones) & ^v & highs } // a zero byte
	n := 0
	for n+8 <= len(b) {
		w := binary.LittleEndian.Uint64(b[n:])
		if w&highs|(w-0x20*ones)&^w&highs|zero(w^'"'*ones)|zero(w^'\\'*ones) != 0 {
			break
		}
		n += 8
	}
	for n < len(b) {
		if c := b[n]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			break
		}
		n++
	}
	return n
}

// walkEnd ends the walk of spliceUTF16 or spliceOffsets for the UTF-16
// offsets index and index+del over a text that ends at byte n: from and
// to are their byte offsets (-1 when the walk did not reach them), u the
// UTF-16 offset the walk reached, cutAt whether each falls inside a
// surrogate pair. It returns the offsets, or what makes the splice
// invalid. (The walks themselves stay loops of local variables: a walk
// through a struct's methods measured 7-10% slower.)
func walkEnd(index, del, u int64, from, to, n int, cutAt [2]bool) (int, int, error) {
	if to < 0 {
		// The walk reached the end of the text, whose length is now
		// known.
		if index > u {
			return 0, 0, fmt.Errorf("index %d is out of range: the string is %d UTF-16 code units long", index, u)
		}
		if del > u-index {
			return 0, 0, fmt.Errorf("deleting %d UTF-16 code units at index %d runs past the end of the string (%d code units long)", del, index, u)
		}
		if from < 0 {
			from = n
		}
		to = n
	}
	for i, p := range [2]int64{index, index + del} {
		if cutAt[i] {
			return 0, 0, fmt.Errorf("UTF-16 offset %d falls inside a surrogate pair (a character outside the BMP counts 2)", p)
		}
	}
	return from, to, nil
}

// escapeSize is the length of the escape at the start of b if it is one
// that appendString writes (a control character, '"' or '\\'), else 0.
func escapeSize(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(b) < 6 || b[2] != '0' || b[3] != '0' || (b[4] != '0' && b[4] != '1') {
			return 0
		}
		switch h := b[5]; {
		case h >= '0' && h <= '9', h >= 'a' && h <= 'f':
		default:
			return 0
		}
		switch string(b[4:6]) {
		case "08", "09", "0a", "0c", "0d": // written \b \t \n \f \r
			return 0
		}
		return 6
	}
	return 0
}

// spliceUTF16 deletes del UTF-16 code units of s at index and inserts ins
// there. A splice may not cut a surrogate pair (a character outside the
// BMP, such as most emoji): JSON text cannot hold half of one.
//
// Offsets are found by walking s, without converting it: an edit of a
// large text costs one pass and one copy. Text that is not valid UTF-8
// (JSON never decodes to it) takes the conversion, which turns every bad
// byte into U+FFFD as it always did.
func spliceUTF16(s string, index, del int64, ins string) (string, error) {
	if index < 0 || del < 0 {
		return "", fmt.Errorf("index and delete must not be negative")
	}
	if !utf8.ValidString(s) || !utf8.ValidString(ins) {
		return spliceUTF16Converted(s, index, del, ins)
	}
	last := index + del
	start, end := -1, -1
	cutAt := [2]bool{} // index, index+del inside a surrogate pair
	var u int64        // UTF-16 offset of the rune at byte i
	for i, r := range s {
		if u == index {
			start = i
		}
		if u == last {
			end = i
			break
		}
		w := int64(1)
		if r >= 0x10000 {
			w = 2
		}
		if u < index && index < u+w {
			cutAt[0] = true
		}
		if u < last && last < u+w {
			cutAt[1] = true
		}
		u += w
	}
	start, end, err := walkEnd(index, del, u, start, end, len(s), cutAt)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(start + len(ins) + len(s) - end)
	b.WriteString(s[:start])
	b.WriteString(ins)
	b.WriteString(s[end:])
	return b.String(), nil
}

// spliceUTF16Converted is spliceUTF16 by converting s to UTF-16 and back.
func spliceUTF16Converted(s string, index, del int64, ins string) (string, error) {
	u := utf16.Encode([]rune(s))
	n := int64(len(u))
	if index < 0 || del < 0 {
		return "", fmt.Errorf("index and delete must not be negative")
	}
	if index > n {
		return "", fmt.Errorf("index %d is out of range: the string is %d UTF-16 code units long", index, n)
	}
	if del > n-index {
		return "", fmt.Errorf("deleting %d UTF-16 code units at index %d runs past the end of the string (%d code units long)", del, index, n)
	}
	for _, p := range [2]int64{index, index + del} {
		if p > 0 && p < n && isLowSurrogate(u[p]) {
			return "", fmt.Errorf("UTF-16 offset %d falls inside a surrogate pair (a character outside the BMP counts 2)", p)
		}
	}
	out := make([]uint16, 0, n-del+int64(len(ins)))
	out = append(out, u[:index]...)
	for _, r := range ins {
		out = utf16.AppendRune(out, r)
	}
	out = append(out, u[index+del:]...)
	return string(utf16.Decode(out)), nil
}

func isLowSurrogate(c uint16) bool { return c >= 0xDC00 && c <= 0xDFFF }

// parsePointer splits an RFC 6901 JSON pointer into unescaped reference
// tokens; "" is the whole document.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("path %q is not a JSON pointer: it must be empty or start with '/'", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, t := range parts {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("path %q: '~' must be followed by 0 or 1", p)
			}
		}
		// RFC 6901: ~1 first, then ~0, so that "~01" is "~1".
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

func pointerPrefix(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// arrayIndex parses an RFC 6901 array index: digits without a leading
// zero ("-", the element after the last, names no string).
func arrayIndex(tok string) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(tok)
	return n, err == nil
}
