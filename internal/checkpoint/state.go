package checkpoint

import (
	"cmp"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var errEOF = io.EOF

// bucketState is what a Bucket remembers: manifests it read (they are
// immutable), the ones found corrupt after a restore, and the files
// garbage collection saw unreferenced.
type bucketState struct {
	mu        sync.Mutex
	manifests map[string]*Manifest
	// corrupt holds the manifests whose files failed their check after
	// they were restored (RestoreUnchecked): a restore skips them, so
	// that the restore that replaces a corrupt checkpoint does not pick
	// it again. In memory only: a restart checks them again.
	corrupt map[string]bool
	// unreferenced is when GC first saw a file that no manifest names.
	unreferenced map[string]time.Time
	lastGC       time.Time
}

func newBucketState() *bucketState {
	return &bucketState{manifests: map[string]*Manifest{}, corrupt: map[string]bool{}, unreferenced: map[string]time.Time{}}
}

func (s *bucketState) manifest(key string) *Manifest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.manifests[key]
}

func (s *bucketState) rememberManifest(key string, m *Manifest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.manifests[key] = m
}

func (s *bucketState) markCorrupt(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corrupt[key] = true
}

func (s *bucketState) isCorrupt(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.corrupt[key]
}

func (s *bucketState) forgetManifest(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.manifests, key)
}

// sortRefs sorts manifests newest offset first, then newest generation
// (of two checkpoints of the same changelog prefix, the newer owner's),
// then by name descending, so the order is total.
func sortRefs(refs []manifestRef) {
	slices.SortFunc(refs, func(a, b manifestRef) int {
		if c := cmp.Compare(b.offset, a.offset); c != 0 {
			return c
		}
		if c := cmp.Compare(b.generation, a.generation); c != 0 {
			return c
		}
		if a.key > b.key {
			return -1
		}
		if a.key < b.key {
			return 1
		}
		return 0
	})
}

// Metrics of checkpoints.
type Metrics struct {
	taken        prometheus.Counter
	uploaded     prometheus.Counter
	uploadBytes  prometheus.Counter
	reused       prometheus.Counter
	restores     *prometheus.CounterVec
	skipped      prometheus.Counter
	deleted      *prometheus.CounterVec
	restoreTime  prometheus.Histogram
	checkpointAt *prometheus.GaugeVec
}

// NewMetrics registers the metrics of checkpoints with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		taken:       prometheus.NewCounter(prometheus.CounterOpts{Name: "canon_checkpoints_taken_total", Help: "Checkpoints written to the bucket."}),
		uploaded:    prometheus.NewCounter(prometheus.CounterOpts{Name: "canon_checkpoint_files_uploaded_total", Help: "Checkpoint files uploaded (the bucket did not hold them)."}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "canon_checkpoint_upload_bytes_total", Help: "Bytes of checkpoint files uploaded."}),
		reused:      prometheus.NewCounter(prometheus.CounterOpts{Name: "canon_checkpoint_files_reused_total", Help: "Checkpoint files the bucket held already."}),
		restores:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canon_checkpoint_restores_total", Help: "Partitions restored from a checkpoint (result=restored) or that found none usable (result=none)."}, []string{"result"}),
		skipped:     prometheus.NewCounter(prometheus.CounterOpts{Name: "canon_checkpoint_skipped_total", Help: "Checkpoints a restore skipped: missing, truncated or corrupt files, another topic incarnation."}),
		deleted:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canon_checkpoint_deleted_total", Help: "Objects garbage collected, by kind (manifest, file)."}, []string{"kind"}),
		restoreTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "canon_checkpoint_restore_seconds", Help: "Time to download and ingest a checkpoint.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),
		checkpointAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "canon_checkpoint_offset", Help: "Changelog offset of the newest checkpoint this instance wrote, per partition."},
			[]string{"partition"}),
	}
	if reg != nil {
		reg.MustRegister(m.taken, m.uploaded, m.uploadBytes, m.reused, m.restores, m.skipped, m.deleted, m.restoreTime, m.checkpointAt)
	}
	return m
}
