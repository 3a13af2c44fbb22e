//go:build !linux

package bundle_test

import "time"

// threadCPU is not measured on this system: the benchmarks report wall
// time only.
func threadCPU() time.Duration { return 0 }
