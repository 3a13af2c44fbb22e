package cli

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePartitionSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int32
		err  string
	}{
		{in: "", want: nil},
		{in: "0-5", want: []int32{0, 1, 2, 3, 4, 5}},
		{in: "8, 0-2,2", want: []int32{0, 1, 2, 8}},
		{in: "11", want: []int32{11}},
		{in: "12", err: "does not exist: the topics have 12 partitions (0-11)"},
		{in: "5-3", err: "goes down; write it as 3-5"},
		{in: "a-3", err: `"a" is not a partition number`},
		{in: "-1", err: `"" is not a partition number`},
		{in: "1,,2", err: `"" is not a partition number`},
	} {
		got, err := parsePartitionSet(tc.in, 12)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
