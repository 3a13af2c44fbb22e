package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/checkpoint"
)

// TestRunner: the owner checkpoints a partition once it advanced Every
// records, or Interval after the last checkpoint if it changed; a new
// runner (a new owner) starts from the newest manifest in the bucket,
// not with a checkpoint at once; a partition it does not own is never
// checkpointed.
func TestRunner(t *testing.T) {
	f := newFixture(t)
	k := f.open(checkpoint.Config{})
	owned := []int32{part}
	newRunner := func(interval time.Duration) *checkpoint.Runner {
		r, err := checkpoint.NewRunner(checkpoint.RunnerConfig{
			Bucket: k, Every: 2000, Interval: interval,
			Owned:   func() []int32 { return owned },
			TopicID: func(context.Context) (string, error) { return topicID, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx := context.Background()
	manifests := func() int { return len(f.objects("canon/manifests/")) }
	r := newRunner(time.Hour)
	f.write(500) // ~1500 records
	if err := r.Once(ctx); err != nil || manifests() != 0 {
		t.Fatalf("Once below Every: %v, %d manifests; want none", err, manifests())
	}
	f.write(500)
	if err := r.Once(ctx); err != nil || manifests() != 1 {
		t.Fatalf("Once past Every: %v, %d manifests; want 1", err, manifests())
	}
	m, err := k.Newest(ctx, part)
	if err != nil || m.Offset != f.next {
		t.Fatalf("Newest = %v, %v; want offset %d", m, err, f.next)
	}
	if err := r.Once(ctx); err != nil || manifests() != 1 {
		t.Fatalf("Once without change: %v, %d manifests; want 1", err, manifests())
	}
	// A new owner with a short interval: the newest manifest counts as
	// its last checkpoint; a change after the interval is checkpointed.
	r = newRunner(50 * time.Millisecond)
	f.write(10)
	time.Sleep(60 * time.Millisecond)
	if err := r.Once(ctx); err != nil || manifests() != 2 {
		t.Fatalf("Once after Interval: %v, %d manifests; want 2", err, manifests())
	}
	owned = nil
	f.write(2000)
	if err := r.Once(ctx); err != nil || manifests() != 2 {
		t.Fatalf("Once of a partition not owned: %v, %d manifests; want 2", err, manifests())
	}
}
