package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/canon-sync/canon/schemas"
	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON value: members sorted, no insignificant whitespace, numbers and
// strings in their one canonical spelling. Everything Canon hashes (item
// meta and bodies, scalars) is canonical, so equal values hash equally on
// every machine.
//
// As RFC 8785 prescribes, numbers are IEEE 754 doubles: an integer beyond
// 2^53 loses precision (send such values as strings).
func Canonical(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, errors.New("canonicalize JSON: empty input")
	}
	if isCanonical(raw) {
		// Most values are canonical already: a copy, as jcs would make.
		return clone(raw), nil
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalize JSON: %w", err)
	}
	return out, nil
}

// BodyHash is the content address of a canonical item body (or of a
// chunk): its SHA-256 in lower-case hex.
func BodyHash(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}

// isJSONNull reports whether a JSON text is the literal null.
func isJSONNull(raw []byte) bool {
	i := schemas.SkipJSONSpace(raw, 0)
	return len(raw)-i >= 4 && string(raw[i:i+4]) == "null" && schemas.SkipJSONSpace(raw, i+4) == len(raw)
}

// firstByte is the first non-whitespace byte of a JSON text, 0 if none.
func firstByte(raw []byte) byte {
	if i := schemas.SkipJSONSpace(raw, 0); i < len(raw) {
		return raw[i]
	}
	return 0
}

// scalarsSize is the length of the canonical JSON object of the scalars,
// computed without encoding it: scalar names are ASCII letters, digits and
// '_' (schemas.ValidateScalarName), which JSON never escapes, and the
// values are canonical already.
func scalarsSize(scalars map[string]json.RawMessage) int {
	n := 2 // {}
	for k, v := range scalars {
		n += len(k) + 3 + len(v) // "k":v
	}
	if len(scalars) > 1 {
		n += len(scalars) - 1 // commas
	}
	return n
}
