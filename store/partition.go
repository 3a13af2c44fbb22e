package store

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// partitionState serializes the writers of one partition, Apply and
// DropPartition, and remembers under the same lock what Apply learned of
// the partition's committed state: the heads of the branches it applied
// (version, state sum, state hash), the digests of the latest entries of
// the items it applied, and the offset. The next Apply of the partition
// then reads none of them again. Only these writers change a
// partition, so what is remembered stays true until a commit fails (the
// batch may or may not be in) or the partition is dropped; both forget
// it. Queries never use it: they read the database.
type partitionState struct {
	mu sync.Mutex

	heads       map[branchID]headSummary
	latest      map[itemID]latestItem // clean: exists and digest only
	offset      int64
	offsetFound bool // the partition has an offset
	offsetKnown bool // offset and offsetFound are known

	// verified are bodies Apply checked, by first chunk (see putManifest):
	// the next version of an edited item resumes their hash.
	verified map[blobID]*verifiedBody

	// ap is reused by each Apply, so that its maps and buffers are.
	ap applier

	// storedChunks are chunks known to be in the database: HasChunk's
	// answers and what Apply committed. The Decider asks for every chunk
	// of every body it writes, and an edit of a large item finds most of
	// them stored. Chunks are only ever deleted with the whole partition
	// (DropPartition), which clears the set and moves chunkGen on, so
	// that an answer read before the drop is not remembered after it.
	// deploys are the partition's active bundle deploys by scope, loaded
	// by the first query and kept current by Apply; deployGen moves on
	// with every change, so that a load that raced one is not kept.
	bundleMu      sync.RWMutex
	deploys       map[scopeID]Deployed
	deploysLoaded bool
	deployGen     uint64

	chunkMu      sync.RWMutex
	chunkGen     uint64
	storedChunks map[blobID]struct{}
}

// maxRememberedChunks bounds storedChunks; it is emptied when full.
const maxRememberedChunks = 1 << 16

func (ps *partitionState) chunkStored(id blobID) (stored bool, gen uint64) {
	ps.chunkMu.RLock()
	defer ps.chunkMu.RUnlock()
	_, stored = ps.storedChunks[id]
	return stored, ps.chunkGen
}

// rememberChunk notes a chunk HasChunk found at generation gen, unless
// the partition was dropped since.
func (ps *partitionState) rememberChunk(id blobID, gen uint64) {
	ps.chunkMu.Lock()
	defer ps.chunkMu.Unlock()
	if gen == ps.chunkGen {
		ps.addChunksLocked(id)
	}
}

// addChunks notes chunks Apply committed (under ps.mu, which
// DropPartition holds too).
func (ps *partitionState) addChunks(ids ...blobID) {
	ps.chunkMu.Lock()
	defer ps.chunkMu.Unlock()
	ps.addChunksLocked(ids...)
}

func (ps *partitionState) addChunksLocked(ids ...blobID) {
	if ps.storedChunks == nil || len(ps.storedChunks)+len(ids) > maxRememberedChunks {
		ps.storedChunks = make(map[blobID]struct{}, len(ids))
	}
	for _, id := range ids {
		ps.storedChunks[id] = struct{}{}
	}
}

func (ps *partitionState) forgetChunks() {
	ps.chunkMu.Lock()
	defer ps.chunkMu.Unlock()
	ps.storedChunks = nil
	ps.chunkGen++
}

// maxRememberedHeads and maxRememberedItems bound what a partition
// remembers; beyond them, an arbitrary entry is forgotten for each new one.
const (
	maxRememberedHeads = 1 << 14
	maxRememberedItems = 1 << 16
)

// maxVerifiedBodies bounds the checked bodies a partition remembers (a
// few KiB each: chunk hashes and hash states).
const maxVerifiedBodies = 256

// maxReusedEntries bounds the size of the maps an applier keeps for the
// next Apply: a large replay's are dropped.
const maxReusedEntries = 1 << 12

func (ps *partitionState) applier(s *Store, p int32, b *pebble.Batch, r pebble.Reader) *applier {
	a := &ps.ap
	a.s, a.p, a.b, a.r = s, p, b, r
	if a.heads == nil {
		a.heads = make(map[branchID]*branchHead)
		a.latest = make(map[itemID]latestItem)
		a.lastIDs = make(map[lastIDID]uint64)
		a.chunks = make(map[blobID][]byte)
		a.manifests = make(map[blobID]manifest)
		a.verified = make(map[blobID]*verifiedBody)
		a.groups = make(map[groupID]string)
		a.groupClients = make(map[groupClientID]struct{})
		a.clients = make(map[clientID]string)
	}
	return a
}

// reset drops what the applier knows of its call, and its references to
// the call's records.
func (a *applier) reset() {
	a.s, a.b, a.r = nil, nil, nil
	a.org, a.project = "", ""
	a.source, a.sourceSet = 0, false
	a.deploys = nil
	if len(a.heads)+len(a.latest)+len(a.chunks)+len(a.manifests)+len(a.groupClients)+len(a.verified) > maxReusedEntries {
		a.heads, a.latest, a.lastIDs, a.chunks, a.manifests, a.verified = nil, nil, nil, nil, nil, nil
		a.groups, a.groupClients, a.clients = nil, nil, nil
		return
	}
	clear(a.groups)
	clear(a.groupClients)
	clear(a.clients)
	clear(a.heads)
	clear(a.latest)
	clear(a.lastIDs)
	clear(a.chunks)
	clear(a.manifests)
	clear(a.verified)
}

// committed remembers the heads and the offset after a's batch was
// committed.
func (ps *partitionState) committed(a *applier, offset int64) {
	if ps.heads == nil {
		ps.heads = make(map[branchID]headSummary, len(a.heads))
	}
	if ps.latest == nil {
		ps.latest = make(map[itemID]latestItem, len(a.latest))
	}
	for id, bh := range a.heads {
		remember(ps.heads, id, bh.headSummary, maxRememberedHeads)
	}
	for id, li := range a.latest {
		remember(ps.latest, id, latestItem{exists: li.exists, digest: li.digest}, maxRememberedItems)
	}
	ps.offset, ps.offsetFound, ps.offsetKnown = offset, true, true
	if len(a.verified) > 0 && ps.verified == nil {
		ps.verified = make(map[blobID]*verifiedBody, len(a.verified))
	}
	for id, vb := range a.verified {
		remember(ps.verified, id, vb, maxVerifiedBodies)
	}
	if len(a.chunks) > 0 {
		ids := make([]blobID, 0, len(a.chunks))
		for id := range a.chunks {
			ids = append(ids, id)
		}
		ps.addChunks(ids...)
	}
}

// remember sets m[k] = v, first forgetting an arbitrary entry if m is full.
func remember[K comparable, V any](m map[K]V, k K, v V, max int) {
	if _, ok := m[k]; !ok && len(m) >= max {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// forget drops what the partition remembers: the next Apply reads the
// database.
func (ps *partitionState) forget() {
	ps.heads, ps.latest, ps.verified = nil, nil, nil
	ps.offset, ps.offsetFound, ps.offsetKnown = 0, false, false
}
