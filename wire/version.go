package wire

import (
	"maps"
	"slices"
	"strconv"

	"github.com/canon-sync/canon/schemas"
)

// The live projector encodes every version once, on the changelog's
// goroutine, so this encoding bounds the fan-out of many projects with
// few subscribers each. AppendVersion writes the bytes json.Marshal gives
// for a VersionMessage (the same member order, sorted map keys, HTML-safe
// escaping, compacted raw values; a fuzzer holds the two equal), without
// reflection.

// EncodeVersion is the version message of v.
func EncodeVersion(v *schemas.Version) ([]byte, error) {
	return AppendVersion(nil, v)
}

// AppendVersion appends the version message of v to b. The error is that
// of a scalar or meta that is not JSON.
func AppendVersion(b []byte, v *schemas.Version) ([]byte, error) {
	b = append(b, `{"type":"version","org":`...)
	b = appendString(b, v.Org)
	b = append(b, `,"project":`...)
	b = appendString(b, v.Project)
	b = append(b, `,"branch":`...)
	b = appendString(b, v.Branch)
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, v.Version, 10)
	b = append(b, `,"parent":`...)
	b = strconv.AppendUint(b, v.Parent, 10)
	if v.Base != nil {
		b = append(b, `,"base":{"branch":`...)
		b = appendString(b, v.Base.Branch)
		b = append(b, `,"version":`...)
		b = strconv.AppendUint(b, v.Base.Version, 10)
		b = append(b, '}')
	}
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, v.TS, 10)
	b = append(b, `,"stateHash":`...)
	b = appendString(b, v.StateHash)
	if v.Bundle != "" {
		b = append(b, `,"bundle":`...)
		b = appendString(b, v.Bundle)
	}
	b = append(b, `,"scalars":{`...)
	var err error
	for i, name := range sortedKeys(v.Scalars) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, name)
		b = append(b, ':')
		if b, err = appendRaw(b, v.Scalars[name]); err != nil {
			return nil, err
		}
	}
	b = append(b, `},"items":[`...)
	for i := range v.Items {
		it := &v.Items[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"collection":`...)
		b = appendString(b, it.Collection)
		b = append(b, `,"id":`...)
		b = appendString(b, it.ID)
		b = append(b, `,"op":`...)
		b = appendString(b, it.Op)
		if len(it.Meta) > 0 {
			b = append(b, `,"meta":`...)
			if b, err = appendRaw(b, it.Meta); err != nil {
				return nil, err
			}
		}
		if it.Hash != "" {
			b = append(b, `,"hash":`...)
			b = appendString(b, it.Hash)
		}
		if it.Size != 0 {
			b = append(b, `,"size":`...)
			b = strconv.AppendInt(b, it.Size, 10)
		}
		b = append(b, '}')
	}
	b = append(b, `],"mutations":[`...)
	for i := range v.Mutations {
		o := &v.Mutations[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"clientGroup":`...)
		b = appendString(b, o.ClientGroup)
		b = append(b, `,"client":`...)
		b = appendString(b, o.Client)
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, o.ID, 10)
		b = append(b, `,"name":`...)
		b = appendString(b, o.Name)
		b = append(b, `,"status":`...)
		b = appendString(b, o.Status)
		if o.Error != "" {
			b = append(b, `,"error":`...)
			b = appendString(b, o.Error)
		}
		if o.Code != "" {
			b = append(b, `,"code":`...)
			b = appendString(b, o.Code)
		}
		b = append(b, '}')
	}
	b = append(b, `],"lastIds":{`...)
	for i, client := range sortedKeys(v.LastIDs) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, client)
		b = append(b, ':')
		b = strconv.AppendUint(b, v.LastIDs[client], 10)
	}
	return append(b, "}}"...), nil
}

// VersionSize is a size of buffer that holds most version messages of v.
func VersionSize(v *schemas.Version) int {
	return 512 + 128*(len(v.Items)+len(v.Mutations))
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 1 {
		for k := range m {
			return []string{k}
		}
	}
	return slices.Sorted(maps.Keys(m))
}
