package producer

import (
	"testing"
	"time"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
)

// TestWatcherDuplicateChecksDue checks when a wait is due the two broker
// requests of a duplicate check: after firstCheck, then at doubling
// intervals up to maxCheck, and at once when the changelog holds a version
// of a later mutation of its partition.
func TestWatcherDuplicateChecksDue(t *testing.T) {
	w, err := newWatcher(&Config{Topics: kafka.DefaultTopicNames(), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	add := func(p int32, off int64) *waiter {
		wt := &waiter{pos: position{p, off}, since: t0, check: t0.Add(w.firstCheck), interval: w.firstCheck, done: make(chan outcome, 1)}
		w.waits[wt.pos] = append(w.waits[wt.pos], wt)
		return wt
	}
	a, b := add(0, 10), add(1, 10)
	due := func(at time.Duration, want ...*waiter) {
		t.Helper()
		got := w.dueChecks(t0.Add(at))
		if len(got) != len(want) {
			t.Fatalf("at %v: %d waiters due, want %d", at, len(got), len(want))
		}
		for _, g := range got {
			found := false
			for _, x := range want {
				found = found || g == x
			}
			if !found {
				t.Fatalf("at %v: waiter at %+v due, want it not", at, g.pos)
			}
		}
	}
	due(0)
	due(w.firstCheck - time.Millisecond)
	due(w.firstCheck, a, b)
	due(w.firstCheck + time.Millisecond)
	// The next check of each is 2×firstCheck after the first.
	due(3*w.firstCheck - time.Millisecond)
	due(3*w.firstCheck, a, b)

	// A version of a later mutation of partition 1 makes b due at once.
	w.event(&changelog.Event{Partition: 1, Offset: 5, Version: &schemas.Version{Org: "o", Project: "p", Branch: "main", Version: 1,
		Mutations: []schemas.Outcome{{Client: "c", ID: 1, Offset: 11}}}})
	due(3*w.firstCheck+time.Millisecond, b)
	// A mutation below the waiter's does not.
	w.event(&changelog.Event{Partition: 0, Offset: 5, Version: &schemas.Version{Org: "o", Project: "p", Branch: "main", Version: 1,
		Mutations: []schemas.Outcome{{Client: "c", ID: 1, Offset: 9}}}})
	due(3*w.firstCheck+2*time.Millisecond, b)

	// Once its end offsets are known it is never checked again; the
	// interval stops doubling at maxCheck.
	b.ends = &[2]int64{1, 1}
	for at := 4 * w.firstCheck; at < 30*time.Second; at += w.recheck {
		for _, wt := range w.dueChecks(t0.Add(at)) {
			if wt != a {
				t.Fatalf("at %v: waiter at %+v due, want only a", at, wt.pos)
			}
		}
	}
	if a.interval != w.maxCheck {
		t.Errorf("interval after 30s: %v, want maxCheck %v", a.interval, w.maxCheck)
	}
}
