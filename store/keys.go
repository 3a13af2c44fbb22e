package store

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// The store's keys. docs/store.md has the table; in short, every key is
//
//	partition (4 bytes, big-endian) | kind (1 byte) | components
//
// so that a partition is one contiguous range (DropPartition is a single
// DeleteRange) and, within it, each kind of record is one contiguous range
// per project, per branch, per item. Variable-length components (org,
// project, branch, collection, item id, client) are escaped and terminated
// the way CockroachDB encodes bytes ascending: 0x00 becomes 0x00 0xFF and
// the string ends with 0x00 0x01. The encoding preserves order, no encoded
// string is a prefix of another, and the successor of an encoded prefix is
// found by incrementing its last byte (see prefixEnd). Versions and ids are
// 8 bytes big-endian; MVCC item keys carry the bitwise complement of the
// version so that newer versions sort first and "the item as of V" is one
// SeekGE. Hashes are the 32 raw bytes of the SHA-256.

// Key kinds, the byte after the partition.
const (
	kindMeta     byte = 0x01 // partition meta: name → value
	kindVersion  byte = 0x02 // org, project, branch, version → version record
	kindHead     byte = 0x03 // org, project, branch → latest version
	kindItem     byte = 0x04 // org, project, branch, collection, id, ^version → item entry or tombstone
	kindLatest   byte = 0x05 // org, project, branch, collection, id → item entry
	kindManifest byte = 0x06 // org, project, body hash → size and chunk list
	kindChunk    byte = 0x07 // org, project, chunk hash → bytes
	kindMutation byte = 0x08 // org, project, branch, client, id → version, status, error
	kindLastID   byte = 0x09 // org, project, branch, client → last id
	kindGroup    byte = 0x0A // org, project, group → principal (groups.go)
	// kindGroupClient: org, project, group, client → empty (groups.go)
	kindGroupClient byte = 0x0B
	kindClient      byte = 0x0C // org, project, client → client group (groups.go)
	kindRejection   byte = 0x0D // org, project, branch, client, id → reason (rejections.go)
)

// globalPartition is the "partition" of the store-wide meta keys. Kafka
// partitions are non-negative int32, so 0xFFFFFFFF is never a real one.
const globalPartition uint32 = 0xFFFFFFFF

// Names of meta keys.
const (
	metaOffset     = "offset"     // per partition: next changelog offset to read
	metaSource     = "source"     // per partition: highest source offset (canon.mutations) of the applied versions
	metaPartitions = "partitions" // global: partition count the store was built with
	metaRejected   = "rejected"   // global, one per partition of canon.rejected: next offset recorded (rejections.go)
)

const (
	escape     byte = 0x00
	escaped00  byte = 0xFF
	terminator byte = 0x01
)

var errBadKey = errors.New("malformed key")

func appendPartition(b []byte, p uint32) []byte { return binary.BigEndian.AppendUint32(b, p) }

func appendUint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// appendString appends s escaped and terminated, preserving order.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escape {
			b = append(b, escape, escaped00)
		} else {
			b = append(b, s[i])
		}
	}
	return append(b, escape, terminator)
}

// decodeString decodes a string written by appendString at the start of b
// and returns the rest of b.
func decodeString(b []byte) (string, []byte, error) {
	var out []byte
	for {
		i := bytes.IndexByte(b, escape)
		if i < 0 || i+1 >= len(b) {
			return "", nil, errBadKey
		}
		switch b[i+1] {
		case terminator:
			if out == nil {
				return string(b[:i]), b[i+2:], nil
			}
			return string(append(out, b[:i]...)), b[i+2:], nil
		case escaped00:
			out = append(out, b[:i]...)
			out = append(out, escape)
			b = b[i+2:]
		default:
			return "", nil, errBadKey
		}
	}
}

// prefixEnd returns the smallest key greater than every key that starts
// with prefix: the upper bound of a prefix scan. For an encoded string
// prefix (ending in 0x00 0x01) it ends in 0x00 0x02, which no encoding
// produces, so a SeekGE to it skips exactly that string's keys.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xFF {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // all 0xFF: no upper bound
}

func partitionPrefix(p int32) []byte { return appendPartition(make([]byte, 0, 4), uint32(p)) }

func metaKey(p uint32, name string) []byte {
	b := appendPartition(make([]byte, 0, 5+len(name)+2), p)
	b = append(b, kindMeta)
	return appendString(b, name)
}

func offsetKey(p int32) []byte { return metaKey(uint32(p), metaOffset) }

func sourceKey(p int32) []byte { return metaKey(uint32(p), metaSource) }

func partitionsKey() []byte { return metaKey(globalPartition, metaPartitions) }

// projectPrefix is partition | kind | org | project.
func projectPrefix(p int32, kind byte, org, project string) []byte {
	return appendProjectPrefix(make([]byte, 0, 5+len(org)+len(project)+4+48), p, kind, org, project)
}

// The append forms of the key builders let Apply build its keys in
// reused buffers: a batch copies what it is given.

func appendProjectPrefix(b []byte, p int32, kind byte, org, project string) []byte {
	b = appendPartition(b, uint32(p))
	b = append(b, kind)
	b = appendString(b, org)
	return appendString(b, project)
}

// branchPrefix is partition | kind | org | project | branch.
func branchPrefix(p int32, kind byte, org, project, branch string) []byte {
	return appendString(projectPrefix(p, kind, org, project), branch)
}

func appendBranchPrefix(b []byte, p int32, kind byte, org, project, branch string) []byte {
	return appendString(appendProjectPrefix(b, p, kind, org, project), branch)
}

func versionKey(p int32, org, project, branch string, v uint64) []byte {
	return appendUint64(branchPrefix(p, kindVersion, org, project, branch), v)
}

func appendVersionKey(b []byte, p int32, org, project, branch string, v uint64) []byte {
	return appendUint64(appendBranchPrefix(b, p, kindVersion, org, project, branch), v)
}

func headKey(p int32, org, project, branch string) []byte {
	return branchPrefix(p, kindHead, org, project, branch)
}

func appendHeadKey(b []byte, p int32, org, project, branch string) []byte {
	return appendBranchPrefix(b, p, kindHead, org, project, branch)
}

// itemPrefix is the prefix of all MVCC entries of one item.
func itemPrefix(p int32, org, project, branch, collection, id string) []byte {
	b := branchPrefix(p, kindItem, org, project, branch)
	b = appendString(b, collection)
	return appendString(b, id)
}

// itemKey is the MVCC key of an item at version v: descending versions.
func itemKey(p int32, org, project, branch, collection, id string, v uint64) []byte {
	return appendUint64(itemPrefix(p, org, project, branch, collection, id), ^v)
}

func appendItemKey(b []byte, p int32, org, project, branch, collection, id string, v uint64) []byte {
	b = appendBranchPrefix(b, p, kindItem, org, project, branch)
	b = appendString(b, collection)
	b = appendString(b, id)
	return appendUint64(b, ^v)
}

func latestKey(p int32, org, project, branch, collection, id string) []byte {
	return appendLatestKey(make([]byte, 0, 5+len(org)+len(project)+len(branch)+len(collection)+len(id)+16), p, org, project, branch, collection, id)
}

func appendLatestKey(b []byte, p int32, org, project, branch, collection, id string) []byte {
	b = appendBranchPrefix(b, p, kindLatest, org, project, branch)
	b = appendString(b, collection)
	return appendString(b, id)
}

func manifestKey(p int32, org, project string, hash [32]byte) []byte {
	return append(projectPrefix(p, kindManifest, org, project), hash[:]...)
}

func appendManifestKey(b []byte, p int32, org, project string, hash [32]byte) []byte {
	return append(appendProjectPrefix(b, p, kindManifest, org, project), hash[:]...)
}

func chunkKey(p int32, org, project string, hash [32]byte) []byte {
	return append(projectPrefix(p, kindChunk, org, project), hash[:]...)
}

func appendChunkKey(b []byte, p int32, org, project string, hash [32]byte) []byte {
	return append(appendProjectPrefix(b, p, kindChunk, org, project), hash[:]...)
}

func mutationKey(p int32, org, project, branch, client string, id uint64) []byte {
	return appendMutationKey(nil, p, org, project, branch, client, id)
}

func appendMutationKey(b []byte, p int32, org, project, branch, client string, id uint64) []byte {
	b = appendBranchPrefix(b, p, kindMutation, org, project, branch)
	b = appendString(b, client)
	return appendUint64(b, id)
}

func lastIDKey(p int32, org, project, branch, client string) []byte {
	return appendString(branchPrefix(p, kindLastID, org, project, branch), client)
}

func appendLastIDKey(b []byte, p int32, org, project, branch, client string) []byte {
	return appendString(appendBranchPrefix(b, p, kindLastID, org, project, branch), client)
}

// decodeCollectionID decodes "collection | id" at the start of b (the
// rest of an item or latest key after its branch prefix) and returns the
// rest.
func decodeCollectionID(b []byte) (collection, id string, rest []byte, err error) {
	collection, b, err = decodeString(b)
	if err != nil {
		return "", "", nil, err
	}
	id, b, err = decodeString(b)
	if err != nil {
		return "", "", nil, err
	}
	return collection, id, b, nil
}

// decodeItemSuffix decodes "collection | id | ^version", the rest of an
// MVCC item key after its branch prefix.
func decodeItemSuffix(b []byte) (collection, id string, v uint64, err error) {
	collection, id, b, err = decodeCollectionID(b)
	if err != nil {
		return "", "", 0, err
	}
	if len(b) != 8 {
		return "", "", 0, errBadKey
	}
	return collection, id, ^binary.BigEndian.Uint64(b), nil
}
