package bundle_test

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time the calling thread has used, user and system:
// with the goroutine locked to its thread, what a benchmark's own work
// cost, whatever else the machine runs (wall time on a shared machine
// also counts the time other processes took the core).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
