//go:build !linux

package checkpoint

// checkMapped is Linux only (MAP_POPULATE); elsewhere the caller reads
// the file.
func checkMapped(File, string) (bool, error) { return false, nil }
