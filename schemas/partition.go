package schemas

import (
	"fmt"
	"strings"
)

// ProjectKey is the record key of every record about a project in
// canon.mutations and canon.versions: "org/project". All branches of a
// project share it, so they live in one partition.
func ProjectKey(org, project string) []byte {
	return []byte(org + "/" + project)
}

// Partition returns the partition that Kafka's Java default partitioner
// (and franz-go's StickyKeyPartitioner, which Canon's producers use) picks
// for a keyed record among n partitions: murmur2 of the key, made positive
// by masking the sign bit, modulo n.
func Partition(key []byte, n int32) int32 {
	if n <= 0 {
		return 0
	}
	return int32(Murmur2(key)&0x7fffffff) % n
}

// Murmur2 is the 32-bit murmur2 hash as Kafka computes it
// (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c).
func Murmur2(b []byte) int32 {
	const (
		seed = uint32(0x9747b28c)
		m    = uint32(0x5bd1e995)
		r    = 24
	)
	n := len(b)
	h := seed ^ uint32(n)
	i := 0
	for ; n-i >= 4; i += 4 {
		k := uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch n - i {
	case 3:
		h ^= uint32(b[i+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[i+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[i])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// ParseProjectKey splits a record key made by ProjectKey into its org and
// project, and validates both.
func ParseProjectKey(key []byte) (org, project string, err error) {
	s := string(key)
	i := strings.IndexByte(s, '/')
	if i < 0 {
		return "", "", &FieldError{Field: "key", Reason: fmt.Sprintf("%q is not a project key: want \"org/project\"", preview([]byte(s)))}
	}
	org, project = s[:i], s[i+1:]
	if err := ValidateOrg("key", org); err != nil {
		return "", "", fmt.Errorf("org of record key: %w", err)
	}
	if err := ValidateProject("key", project); err != nil {
		return "", "", fmt.Errorf("project of record key: %w", err)
	}
	return org, project, nil
}
