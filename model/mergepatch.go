package model

import "github.com/canon-sync/canon/schemas"

// mergePatch applies an RFC 7396 JSON merge patch to a document; both are
// canonical JSON, and so is the result.
//
// It is implemented here rather than with evanphx/json-patch's MergePatch,
// which departs from RFC 7396 in two ways a client's local implementation
// would not: it refuses a target that is null (the RFC merges into {}), and
// it removes null members of objects inside an array of the patch when the
// target has no such member (the RFC copies the array as is). The RFC's
// algorithm is short, and on canonical text it is a merge of two sorted
// member lists that copies untouched members without decoding them.
func mergePatch(doc, patch []byte) ([]byte, error) {
	return appendMerge(make([]byte, 0, len(doc)+len(patch)), doc, patch, 0)
}

var emptyObject = []byte("{}")

// member is a member of an object: its name b[ks:ke] (quoted) and its
// value b[vs:ve].
type member struct{ ks, ke, vs, ve int }

// appendMerge appends MergePatch(target, patch) to dst; both are inside
// depth objects.
func appendMerge(dst, target, patch []byte, depth int) ([]byte, error) {
	if len(patch) == 0 || len(target) == 0 {
		return nil, errNotCanonical
	}
	if patch[0] != '{' {
		return append(dst, patch...), nil // not an object: it replaces the target
	}
	if target[0] != '{' {
		target = emptyObject
	}
	// The patch's members, in order, then the target's walked against
	// them: untouched members are copied without being decoded.
	var buf [8]member
	pm := buf[:0]
	if _, ok := schemas.JSONMemberSpans(patch, 0, depth, func(ks, ke, vs int) int {
		ve, err := valueEnd(patch, vs, depth+1)
		if err != nil {
			return -1
		}
		pm = append(pm, member{ks, ke, vs, ve})
		return ve
	}); !ok {
		return nil, errNotCanonical
	}
	dst = append(dst, '{')
	n := 0
	var err error
	// add appends the patch's member p merged into tv, the target's value
	// of the same name (emptyObject when it has none); a null removes it.
	add := func(p member, tv []byte) {
		pv := patch[p.vs:p.ve]
		if string(pv) == "null" {
			return
		}
		dst = appendName(dst, patch[p.ks:p.ke], &n)
		dst, err = appendMerge(dst, tv, pv, depth+1)
	}
	_, ok := schemas.JSONMemberSpans(target, 0, depth, func(ks, ke, vs int) int {
		ve, verr := valueEnd(target, vs, depth+1)
		if verr != nil {
			return -1
		}
		name := target[ks:ke]
		c := 1
		for ; len(pm) > 0 && err == nil; pm = pm[1:] {
			if c = compareNames(patch[pm[0].ks:pm[0].ke], name); c >= 0 {
				break
			}
			add(pm[0], emptyObject) // only in the patch
		}
		switch {
		case err != nil:
			return -1
		case c == 0: // in both: merged, or removed by null
			add(pm[0], target[vs:ve])
			pm = pm[1:]
		default: // only in the target: kept
			dst = appendName(dst, name, &n)
			dst = append(dst, target[vs:ve]...)
		}
		if err != nil {
			return -1
		}
		return ve
	})
	for ; len(pm) > 0 && err == nil; pm = pm[1:] {
		add(pm[0], emptyObject)
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNotCanonical
	}
	return append(dst, '}'), nil
}

// appendName appends the name of the n-th member of an object, and a
// comma before it if it is not the first.
func appendName(dst, name []byte, n *int) []byte {
	if *n > 0 {
		dst = append(dst, ',')
	}
	*n++
	dst = append(dst, name...)
	return append(dst, ':')
}
