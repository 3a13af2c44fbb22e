package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// WriterConfig names the Canon client a Writer is.
type WriterConfig struct {
	// Branch is the branch written (default main).
	Branch string
	// ClientGroup is the client's group: one per user agent, owned by the
	// principal of the token that first used it in the project.
	ClientGroup string
	// Client is the client id; its mutation ids increase by 1 from 1.
	Client string
	// LastID is the client's last id that Canon has: the first mutation
	// added gets LastID+1. 0 (the default) asks Canon's read API for it
	// before the first mutation is numbered (Resume), so that a program
	// run again with the same client id goes on from where the last run
	// ended instead of being answered duplicate.
	LastID uint64
	// MaxBatch bounds the mutations of one push (default 500).
	MaxBatch int
	// Wait bounds how long a push waits for its outcomes (0: the
	// server's default).
	Wait time.Duration
	// Retain is how many decided mutations the writer keeps to resend
	// after a gap that names one of them (default 1000).
	Retain int
}

// Writer is one Canon client: it numbers the mutations it is given and
// keeps them until Canon decided them, so that nothing is lost or
// reordered: a push that failed is sent again, and after a gap (Canon
// expects an earlier id than it got, e.g. after a lost push) the writer
// resends from the id Canon expects. It is safe for concurrent use; Flush
// calls are serialized.
type Writer struct {
	c            *Client
	org, project string
	cfg          WriterConfig

	flushing sync.Mutex
	// resuming serializes the look-up of the client's last id; resumed is
	// set (under mu) once next follows it.
	resuming sync.Mutex
	resumed  bool
	mu       sync.Mutex
	next     uint64
	pending  []Mutation // added, not decided, in id order
	// decided are the last mutations decided, in id order, up to Retain.
	decided []Mutation
}

// Writer returns a Writer for one client of a project.
func (c *Client) Writer(org, project string, cfg WriterConfig) *Writer {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if cfg.Retain <= 0 {
		cfg.Retain = 1000
	}
	return &Writer{c: c, org: org, project: project, cfg: cfg, next: cfg.LastID + 1, resumed: cfg.LastID > 0}
}

// Resume asks Canon for the client's last id (Client.LastID) and numbers
// the mutations added after it from there. The first Add calls it when
// WriterConfig.LastID is 0; call it before to bound the look-up with ctx
// or to learn that Canon cannot be reached before mutations are queued.
// Once the writer knows the last id, Resume does nothing.
func (w *Writer) Resume(ctx context.Context) error {
	w.resuming.Lock()
	defer w.resuming.Unlock()
	w.mu.Lock()
	done := w.resumed
	w.mu.Unlock()
	if done {
		return nil
	}
	last, err := w.c.LastID(ctx, w.org, w.project, w.cfg.Branch, w.cfg.Client)
	if err != nil {
		return fmt.Errorf("%w (or set WriterConfig.LastID)", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next, w.resumed = last+1, true
	return nil
}

// Add queues a mutation and returns its id. args is JSON-encoded unless
// it is a json.RawMessage. The first Add of a writer whose LastID is 0
// asks Canon for the client's last id (see Resume), within the Client's
// HTTP timeout and retries; its error is returned and nothing is queued.
func (w *Writer) Add(name string, args any) (uint64, error) {
	raw, ok := args.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(args); err != nil {
			return 0, fmt.Errorf("canon: args of %s: %w", name, err)
		}
	}
	// Add takes no context (its callers queue and flush later); Resume
	// with one bounds the look-up.
	if err := w.Resume(context.Background()); err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.next
	w.next++
	w.pending = append(w.pending, Mutation{Client: w.cfg.Client, ID: id, Name: name, Args: raw, TS: time.Now().UnixMilli()})
	return id, nil
}

// Pending returns how many mutations were added and not yet decided.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// RejectedError is a mutation Canon refused to record (not a gap): its
// id did not advance, so the writer cannot go on past it. The mutation and
// those after it stay pending.
type RejectedError struct{ Outcome Outcome }

func (e *RejectedError) Error() string {
	return fmt.Sprintf("canon: mutation %d of client %s rejected (%s): %s", e.Outcome.ID, e.Outcome.Client, e.Outcome.Reason, e.Outcome.Message)
}

// ErrNotDecided means a push was written but Canon did not decide all of
// its mutations within the wait; they stay pending and the next Flush
// sends them again (those decided meanwhile are then duplicates).
var ErrNotDecided = errors.New("canon: written but not decided within the wait")

// maxGapResends bounds the resends after gaps that make no progress.
const maxGapResends = 5

// Flush pushes the pending mutations in order, waiting for their
// outcomes, until all are decided. It returns the outcomes of the
// mutations decided by this call (applied, error or duplicate), in id
// order, with ErrNotDecided, a *RejectedError or the push's error when it
// stops early.
func (w *Writer) Flush(ctx context.Context) ([]Outcome, error) {
	w.flushing.Lock()
	defer w.flushing.Unlock()
	var decided []Outcome
	stuck := 0
	for {
		w.mu.Lock()
		batch := append([]Mutation(nil), w.pending[:min(len(w.pending), w.cfg.MaxBatch)]...)
		w.mu.Unlock()
		if len(batch) == 0 {
			return decided, nil
		}
		res, err := w.c.Push(ctx, w.org, w.project, Push{Branch: w.cfg.Branch, ClientGroup: w.cfg.ClientGroup, Mutations: batch},
			PushOptions{Wait: true, Timeout: w.cfg.Wait})
		if err != nil {
			return decided, err
		}
		if len(res.Outcomes) != len(batch) {
			return decided, fmt.Errorf("canon: %d outcomes for %d mutations: is the server's producer following the versions topic?", len(res.Outcomes), len(batch))
		}
		done, resendFrom, err := w.settle(res.Outcomes)
		decided = append(decided, done...)
		if err != nil {
			return decided, err
		}
		if resendFrom > 0 {
			if len(done) == 0 {
				if stuck++; stuck > maxGapResends {
					return decided, fmt.Errorf("canon: client %s: Canon keeps expecting id %d", w.cfg.Client, resendFrom)
				}
			}
			continue
		}
		stuck = 0
	}
}

// settle drops the decided mutations from pending. resendFrom is the id
// Canon expects after a gap (0: none), now first in pending.
func (w *Writer) settle(outcomes []Outcome) (done []Outcome, resendFrom uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0 // decided, from the start of pending
	defer func() {
		w.decided = append(w.decided, w.pending[:n]...)
		w.decided = w.decided[max(0, len(w.decided)-w.cfg.Retain):]
		w.pending = w.pending[n:]
	}()
	for _, o := range outcomes {
		switch o.Status {
		case Applied, Errored, Duplicate:
			done = append(done, o)
			n++
		case Rejected:
			if o.Reason != "gap" {
				return done, 0, &RejectedError{Outcome: o}
			}
			// Canon expects an id before this one, which it had decided
			// (its state was restored from an older copy, say): resend
			// from there if the writer still holds it.
			w.decided = append(w.decided, w.pending[:n]...)
			w.pending = w.pending[n:]
			n = 0
			i := len(w.decided)
			for i > 0 && w.decided[i-1].ID >= o.ExpectedID {
				i--
			}
			if i == len(w.decided) || w.decided[i].ID != o.ExpectedID {
				return done, 0, fmt.Errorf("canon: client %s: Canon expects id %d, which this writer no longer holds (it holds %d to %d): was LastID right?",
					w.cfg.Client, o.ExpectedID, firstID(append(w.decided[i:], w.pending...)), w.next-1)
			}
			w.pending = append(append([]Mutation(nil), w.decided[i:]...), w.pending...)
			w.decided = w.decided[:i]
			return done, o.ExpectedID, nil
		case Timeout:
			return done, 0, ErrNotDecided
		default:
			return done, 0, fmt.Errorf("canon: unknown outcome status %q for mutation %d", o.Status, o.ID)
		}
	}
	return done, 0, nil
}

func firstID(ms []Mutation) uint64 {
	if len(ms) == 0 {
		return 0
	}
	return ms[0].ID
}
