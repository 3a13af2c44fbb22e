package checkpoint

import (
	"fmt"
	"hash/crc32"
	"os"
	"runtime/debug"
	"syscall"
)

// checkMapped checks a local file against f's size and CRC-32C by mapping
// it instead of reading it: the check of a hard-linked table then costs
// the CRC alone, not a copy of every byte out of the page cache as well
// (what made a restore from a local bucket grow with the partition). ok
// is false when the file could not be mapped or the manifest has no
// CRC-32C: the caller reads it instead.
//
// Bucket files are never written in place, but a file truncated under
// the mapping would fault on access; the fault is turned into an error
// (debug.SetPanicOnFault) rather than a crash.
func checkMapped(f File, in *os.File) (ok bool, err error) {
	if f.CRC32C == "" || f.Size <= 0 || f.Size != int64(int(f.Size)) {
		return false, nil
	}
	st, err := in.Stat()
	if err != nil {
		return false, err
	}
	if st.Size() != f.Size {
		return true, fmt.Errorf("%w: file %s (%s) has %d bytes, the manifest says %d (truncated)", ErrInvalid, f.Name, f.SHA256, st.Size(), f.Size)
	}
	data, err := syscall.Mmap(int(in.Fd()), 0, int(f.Size), syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {
		return false, nil
	}
	defer func() { _ = syscall.Munmap(data) }()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			ok, err = true, fmt.Errorf("%w: file %s (%s) changed while it was checked: %v", ErrInvalid, f.Name, f.SHA256, r)
		}
	}()
	if got := fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli)); got != f.CRC32C {
		return true, fmt.Errorf("%w: file %s (%s) does not match its checksum %s (corrupt)", ErrInvalid, f.Name, f.SHA256, f.CRC32C)
	}
	return true, nil
}
