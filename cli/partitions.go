package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// parsePartitionSet parses a --partitions value such as "0-5,8,10-11"
// into sorted, distinct partition numbers below count. An empty value
// means every partition (nil).
func parsePartitionSet(s string, count int32) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int32
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parsePartition(lo, count)
		if err != nil {
			return nil, fmt.Errorf("--partitions %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parsePartition(hi, count); err != nil {
				return nil, fmt.Errorf("--partitions %q: %w", s, err)
			}
			if last < first {
				return nil, fmt.Errorf("--partitions %q: range %s goes down; write it as %d-%d", s, part, last, first)
			}
		}
		for p := first; p <= last; p++ {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parsePartition(s string, count int32) (int32, error) {
	p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil || p < 0 {
		return 0, fmt.Errorf("%q is not a partition number: use numbers and ranges like 0-5,8", s)
	}
	if int32(p) >= count {
		return 0, fmt.Errorf("partition %d does not exist: the topics have %d partitions (0-%d)", p, count, count-1)
	}
	return int32(p), nil
}
