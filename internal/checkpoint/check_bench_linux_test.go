package checkpoint

import (
	"crypto/rand"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sync/errgroup"
)

// BenchmarkCheck measures ways of checking a restore's hard-linked
// tables against their CRC-32C over the same files (in the page cache,
// as the tables of a local bucket are right after a take), with the
// restore's parallelism (downloadWorkers): 135 tables of 2.25 MB, the
// shape of a 1M-version partition's checkpoint (about 300 MB).
//
//	go test -run '^$' -bench '^BenchmarkCheck$' -count 5 ./internal/checkpoint/
func BenchmarkCheck(b *testing.B) {
	const files, size = benchFiles, benchFileSize
	fs, paths := benchTables(b)
	run := func(b *testing.B, check func(File, string) error) {
		b.SetBytes(files * size)
		for range b.N {
			var g errgroup.Group
			g.SetLimit(downloadWorkers())
			for i, f := range fs {
				g.Go(func() error { return check(f, paths[i]) })
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("how=mmap-populate", func(b *testing.B) {
		run(b, func(f File, path string) error {
			in, err := os.Open(path)
			if err != nil {
				return err
			}
			defer in.Close()
			ok, err := checkMapped(f, in)
			if !ok && err == nil {
				err = fmt.Errorf("%s not mapped", path)
			}
			return err
		})
	})
	b.Run("how=mmap-sequential", func(b *testing.B) {
		run(b, func(f File, path string) error { return checkMappedAdvise(f, path, 0) })
	})
	b.Run("how=mmap-populate-sequential", func(b *testing.B) {
		run(b, func(f File, path string) error { return checkMappedAdvise(f, path, syscall.MAP_POPULATE) })
	})
	for _, n := range []int{256 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("how=read-%dk", n>>10), func(b *testing.B) {
			run(b, func(f File, path string) error {
				in, err := os.Open(path)
				if err != nil {
					return err
				}
				defer in.Close()
				return checkFile(f, in, discard{}, make([]byte, n))
			})
		})
	}
}

const benchFiles, benchFileSize = 135, 2_250_000

// benchTables writes benchFiles random files of benchFileSize bytes,
// fsynced as a take into a local bucket leaves them.
func benchTables(b *testing.B) ([]File, []string) {
	dir := b.TempDir()
	fs := make([]File, benchFiles)
	paths := make([]string, benchFiles)
	data := make([]byte, benchFileSize)
	for i := range fs {
		if _, err := rand.Read(data); err != nil {
			b.Fatal(err)
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("%06d.sst", i))
		if err := os.WriteFile(paths[i], data, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := syncFile(paths[i]); err != nil {
			b.Fatal(err)
		}
		fs[i] = File{Name: filepath.Base(paths[i]), Size: benchFileSize, CRC32C: fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli))}
	}
	if err := syncFile(dir); err != nil {
		b.Fatal(err)
	}
	return fs, paths
}

// BenchmarkLinkSync measures what downloadAll's sync costs for tables
// hard-linked from a local bucket whose take fsynced them: each op links
// the 135 tables into a new directory and syncs them with the restore's
// parallelism, by fsync (what downloadAll does) or by fdatasync (which
// skips the link count and ctime, the only changes: measured no faster,
// so not used).
//
//	go test -run '^$' -bench '^BenchmarkLinkSync$' -count 5 ./internal/checkpoint/
func BenchmarkLinkSync(b *testing.B) {
	_, paths := benchTables(b)
	for _, how := range []struct {
		name string
		sync func(string) error
	}{{"fsync", syncFile}, {"fdatasync", fdatasync}} {
		b.Run("how="+how.name, func(b *testing.B) {
			for i := range b.N {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), fmt.Sprint(i))
				if err := os.Mkdir(dir, 0o755); err != nil {
					b.Fatal(err)
				}
				links := make([]string, len(paths))
				for j, p := range paths {
					links[j] = filepath.Join(dir, filepath.Base(p))
					if err := os.Link(p, links[j]); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				var g errgroup.Group
				g.SetLimit(downloadWorkers())
				for _, l := range links {
					g.Go(func() error { return how.sync(l) })
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func fdatasync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return syscall.Fdatasync(int(f.Fd()))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// checkMappedAdvise is checkMapped with other mapping flags and
// madvise(MADV_SEQUENTIAL), for BenchmarkCheck.
func checkMappedAdvise(f File, path string, flags int) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	data, err := syscall.Mmap(int(in.Fd()), 0, int(f.Size), syscall.PROT_READ, syscall.MAP_SHARED|flags)
	if err != nil {
		return err
	}
	defer func() { _ = syscall.Munmap(data) }()
	_ = syscall.Madvise(data, syscall.MADV_SEQUENTIAL)
	if got := fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli)); got != f.CRC32C {
		return fmt.Errorf("%s: checksum", path)
	}
	return nil
}
