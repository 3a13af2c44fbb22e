package model

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
	return appendMerge(make([]byte, 0, len(doc)+len(patch)), doc, patch)
}

var emptyObject = []byte("{}")

// appendMerge appends MergePatch(target, patch) to dst.
func appendMerge(dst, target, patch []byte) ([]byte, error) {
	if len(patch) == 0 || len(target) == 0 {
		return nil, errNotCanonical
	}
	if patch[0] != '{' {
		return append(dst, patch...), nil // not an object: it replaces the target
	}
	if target[0] != '{' {
		target = emptyObject
	}
	dst = append(dst, '{')
	n := 0
	member := func(name []byte) {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = append(dst, name...)
		dst = append(dst, ':')
	}
	ti, pi := newObjectIter(target, 0), newObjectIter(patch, 0)
	tks, tke, tvs, tve, tok := ti.next()
	pks, pke, pvs, pve, pok := pi.next()
	for tok || pok {
		c := -1
		switch {
		case !tok:
			c = 1
		case pok:
			c = compareNames(target[tks:tke], patch[pks:pke])
		}
		var err error
		switch {
		case c < 0: // only in the target: kept
			member(target[tks:tke])
			dst = append(dst, target[tvs:tve]...)
			tks, tke, tvs, tve, tok = ti.next()
			continue
		case c > 0: // only in the patch: merged into nothing (nulls dropped)
			if pv := patch[pvs:pve]; string(pv) != "null" {
				member(patch[pks:pke])
				dst, err = appendMerge(dst, emptyObject, pv)
			}
		default: // in both: merged, or removed by null
			if pv := patch[pvs:pve]; string(pv) != "null" {
				member(patch[pks:pke])
				dst, err = appendMerge(dst, target[tvs:tve], pv)
			}
			tks, tke, tvs, tve, tok = ti.next()
		}
		if err != nil {
			return nil, err
		}
		pks, pke, pvs, pve, pok = pi.next()
	}
	if ti.err != nil || pi.err != nil {
		return nil, errNotCanonical
	}
	return append(dst, '}'), nil
}
