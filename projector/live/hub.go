package live

import (
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/wire"
)

// projectKey and the branch name address a subscription.
type projectKey struct{ org, project string }

// entry is one message queued for a subscriber: a complete websocket
// frame, shared by every subscriber it goes to. Version entries carry the
// version number and the changelog offset of its record; rejected entries
// have version 0.
type entry struct {
	version uint64
	offset  int64
	frame   []byte
}

// subscriber is one connection's bounded queue. The hub appends to it,
// the connection's writer takes everything at once.
type subscriber struct {
	key    projectKey
	branch string
	max    int
	notify chan struct{} // capacity 1: "the queue changed"

	mu    sync.Mutex
	queue []entry
	// catchingUp: while the writer reads the store, a version that does
	// not fit is dropped and noted in skipped (the store will have it),
	// instead of overflowing.
	catchingUp bool
	skipped    int64 // highest offset+1 of a dropped version, 0 for none
	overflow   bool
}

func newSubscriber(key projectKey, branch string, max int) *subscriber {
	return &subscriber{key: key, branch: branch, max: max, notify: make(chan struct{}, 1), catchingUp: true,
		queue: make([]entry, 0, min(max, 64))}
}

// push queues e; it returns false when the queue overflowed with it (the
// first time only).
func (s *subscriber) push(e entry) bool {
	s.mu.Lock()
	ok := true
	switch {
	case s.overflow:
	case len(s.queue) < s.max:
		s.queue = append(s.queue, e)
	case s.catchingUp && e.version > 0:
		s.skipped = max(s.skipped, e.offset+1)
	default:
		s.overflow, ok = true, false
		clear(s.queue)
		s.queue = s.queue[:0]
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return ok
}

// take returns the queued entries, handing spare (emptied) to the queue
// for reuse, and whether the queue overflowed.
func (s *subscriber) take(spare []entry) ([]entry, bool) {
	clear(spare)
	s.mu.Lock()
	q := s.queue
	s.queue = spare[:0]
	overflow := s.overflow
	s.mu.Unlock()
	return q, overflow
}

// caughtUp leaves the catch-up mode unless versions were dropped during
// it; then it returns the offset the store must reach to have them.
func (s *subscriber) caughtUp() (skipped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.skipped > 0 {
		skipped, s.skipped = s.skipped, 0
		return skipped
	}
	s.catchingUp = false
	return 0
}

// hub fans the changelog out to subscribers by (org, project, branch).
// Each version is encoded once and its bytes shared by every subscriber.
type hub struct {
	log *slog.Logger
	m   *metrics

	mu   sync.RWMutex
	subs map[projectKey]map[string]map[*subscriber]struct{}
	// next holds, per followed partition, the offset after the last
	// canon.versions record handled. It is updated under mu (read-locked)
	// together with the delivery, so a subscriber registered later knows
	// that every record below it was handled before it came: those are
	// for the store to give it.
	next map[int32]*atomic.Int64
	now  func() time.Time
}

func newHub(partitions []int32, m *metrics, log *slog.Logger, now func() time.Time) *hub {
	h := &hub{log: log, m: m, now: now, subs: map[projectKey]map[string]map[*subscriber]struct{}{},
		next: make(map[int32]*atomic.Int64, len(partitions))}
	for _, p := range partitions {
		h.next[p] = new(atomic.Int64)
	}
	return h
}

// subscribe registers s and returns the offset of canon.versions of
// partition p that the store must reach to hold every version the hub
// handled before s was registered.
func (h *hub) subscribe(s *subscriber, p int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	branches := h.subs[s.key]
	if branches == nil {
		branches = map[string]map[*subscriber]struct{}{}
		h.subs[s.key] = branches
	}
	set := branches[s.branch]
	if set == nil {
		set = map[*subscriber]struct{}{}
		branches[s.branch] = set
	}
	set[s] = struct{}{}
	h.m.subscribers.Inc()
	return h.next[p].Load()
}

func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	branches := h.subs[s.key]
	if _, ok := branches[s.branch][s]; !ok {
		return
	}
	delete(branches[s.branch], s)
	if len(branches[s.branch]) == 0 {
		delete(branches, s.branch)
	}
	if len(branches) == 0 {
		delete(h.subs, s.key)
	}
	h.m.subscribers.Dec()
}

// follows reports whether the hub reads partition p.
func (h *hub) follows(p int32) bool { _, ok := h.next[p]; return ok }

// handle delivers one changelog event.
func (h *hub) handle(ev changelog.Event, versionsTopic string) {
	switch {
	case ev.Err != nil:
		h.m.undecodable.Inc()
		h.log.Warn("skip undecodable changelog record", "topic", ev.Topic, "partition", ev.Partition, "offset", ev.Offset, "err", ev.Err)
	case ev.Version != nil:
		h.publishVersion(ev)
		return
	case ev.Rejected != nil:
		h.publishRejected(ev)
		return
	}
	if ev.Topic == versionsTopic {
		h.advance(ev.Partition, ev.Offset)
	}
}

func (h *hub) advance(p int32, offset int64) {
	if n := h.next[p]; n != nil {
		h.mu.RLock()
		n.Store(offset + 1)
		h.mu.RUnlock()
	}
}

// publishVersion encodes a version once, if anyone listens, and queues it
// for the branch's subscribers.
func (h *hub) publishVersion(ev changelog.Event) {
	v := ev.Version
	key := projectKey{v.Org, v.Project}
	h.m.publishLag.Observe(max(0, float64(h.now().UnixMilli()-ev.Timestamp)/1000))
	h.mu.RLock()
	listened := len(h.subs[key][v.Branch]) > 0
	h.mu.RUnlock()
	var frame []byte
	if listened {
		frame = h.prepared(versionFrame(v))
	}

	h.mu.RLock()
	defer h.mu.RUnlock()
	set := h.subs[key][v.Branch]
	if len(set) > 0 && frame == nil {
		// A subscriber came in between: encode under the lock, rarely.
		frame = h.prepared(versionFrame(v))
	}
	if frame != nil {
		e := entry{version: v.Version, offset: ev.Offset, frame: frame}
		for s := range set {
			if !s.push(e) {
				h.m.overflows.Inc()
			}
		}
	}
	if n := h.next[ev.Partition]; n != nil {
		n.Store(ev.Offset + 1)
	}
}

// publishRejected queues a rejected mutation for every subscriber of its
// project, whatever their branch. Records that name no project (they did
// not decode that far) reach nobody.
func (h *hub) publishRejected(ev changelog.Event) {
	mu := ev.Rejected.Mutation
	if mu == nil {
		return
	}
	key := projectKey{mu.Org, mu.Project}
	h.mu.RLock()
	defer h.mu.RUnlock()
	branches := h.subs[key]
	if len(branches) == 0 {
		return
	}
	frame := h.prepare(wire.EncodeRejected(ev.Rejected))
	if frame == nil {
		return
	}
	e := entry{frame: frame}
	for _, set := range branches {
		for s := range set {
			if !s.push(e) {
				h.m.overflows.Inc()
			}
		}
	}
}

// prepare frames an encoded message once for all its subscribers.
func (h *hub) prepare(b []byte, err error) []byte {
	if err == nil {
		return textFrame(b)
	}
	return h.prepared(nil, err)
}

// prepared is a frame, or nil after reporting why it could not be made.
func (h *hub) prepared(frame []byte, err error) []byte {
	if err == nil {
		return frame
	}
	// Encoding a decoded record cannot fail; if it ever does, say so
	// loudly rather than deliver a gap silently: subscribers fill it from
	// the store when the next version comes.
	h.m.undecodable.Inc()
	h.log.Error("encode live message", "err", err)
	return nil
}

// textFrame is payload as one unmasked, unfragmented websocket text frame,
// which is what a server sends (RFC 6455 section 5.2). Subscribers write
// the same frame bytes, several in one system call.
func textFrame(payload []byte) []byte {
	n := len(payload)
	var f []byte
	switch {
	case n < 126:
		f = append(make([]byte, 0, 2+n), 0x81, byte(n))
	case n <= 0xffff:
		f = append(make([]byte, 0, 4+n), 0x81, 126, byte(n>>8), byte(n))
	default:
		f = append(make([]byte, 0, 10+n), 0x81, 127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	return append(f, payload...)
}
