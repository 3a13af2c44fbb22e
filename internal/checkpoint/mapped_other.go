//go:build !linux

package checkpoint

import "os"

// checkMapped is Linux only (MAP_POPULATE); elsewhere the caller reads
// the file.
func checkMapped(File, *os.File) (bool, error) { return false, nil }
