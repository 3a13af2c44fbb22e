package model

// What the external tests (package model_test, which may import
// model/modeltest) use of the package's internals.
var (
	ErrTxDone  = errTxDone
	SampleText = testText
)

// WithoutBlobCache makes a Decider keep no large bodies or chunk hashes
// across Resets, as it did before it had a cache (benchmarks compare).
func WithoutBlobCache(d *Decider) { d.blobs = nil }

// SetBlobCacheLimit bounds the bytes a Decider keeps of large bodies.
func SetBlobCacheLimit(d *Decider, n int) { d.blobs.limit = n }

// WithoutResplit makes a Decider cut every new body whole, as it did
// before it cut again only around an edit (benchmarks compare).
func WithoutResplit(d *Decider) { d.blobs.noResplit = true }
