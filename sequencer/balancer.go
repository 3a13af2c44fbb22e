package sequencer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group balancer that prefers warm copies.
//
// Each member advertises, in its JoinGroup metadata, the changelog offset
// its store holds of every partition (owned, standby, or left over from
// an earlier ownership): the "copies". The leader then plans:
//
//  1. Balance first: every member gets n/m partitions, and n%m members one
//     more (as the sticky balancers do). Warmth never makes the group
//     lopsided, because one instance deciding for most partitions is a
//     longer outage in throughput than a tail read is in latency.
//  2. Stickiness: a member keeps the partitions it owns (a claim from the
//     newest generation, KIP-792) up to its share.
//  3. Warmth: every other partition goes to the member with room whose
//     copy is the most caught up (the highest offset), a cold member last;
//     partitions some member holds a copy of are placed first, the most
//     caught-up copies first, so that the shares fill with warm copies
//     before cold ones.
//
// The plan is cooperative (KIP-429): a partition moving from a live owner
// is first revoked, and placed in the rebalance that follows (franz-go's
// AdjustCooperative). The group also lists cooperative-sticky after this
// balancer, so that a rolling upgrade from a version without it keeps a
// common protocol until every member has it.

// warmProtocol is the balancer's protocol name in the group.
const warmProtocol = "canon-warm-v1"

// warmBalancer is a kgo.GroupBalancer; copies reads the changelog offsets
// this member's store holds, at each join.
type warmBalancer struct {
	copies func() map[int32]int64
	// synced, when set, is told the member's whole assignment at each
	// sync, before the assignment callbacks run.
	synced func(map[string][]int32)
	// liveness is the address of this member's liveness listener, ""
	// when it has none (liveness.go).
	liveness string
}

var _ kgo.GroupBalancer = (*warmBalancer)(nil)

func (*warmBalancer) ProtocolName() string { return warmProtocol }
func (*warmBalancer) IsCooperative() bool  { return true }

func (w *warmBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 2 // owned partitions and generation
	meta.Topics = interests
	meta.Generation = generation
	for _, topic := range slices.Sorted(maps.Keys(current)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic = topic
		o.Partitions = current[topic]
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	var copies map[int32]int64
	if w.copies != nil {
		copies = w.copies()
	}
	meta.UserData = encodeMemberData(copies, w.liveness)
	return meta.AppendTo(nil)
}

func (w *warmBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	a, err := kgo.ParseConsumerSyncAssignment(assignment)
	if err == nil && w.synced != nil {
		w.synced(a)
	}
	return a, err
}

func (w *warmBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(w, members)
	return b, b.MemberTopics(), err
}

// Balance plans each topic with planWarm (the sequencer consumes one,
// whose partitions are those of the changelog the copies are of).
func (*warmBalancer) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan := b.NewPlan()
	for _, topic := range slices.Sorted(maps.Keys(topics)) {
		var ms []warmMember
		var refs []*kmsg.JoinGroupResponseMember
		b.EachMember(func(member *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
			if !slices.Contains(meta.Topics, topic) {
				return
			}
			m := warmMember{generation: meta.Generation}
			for _, o := range meta.OwnedPartitions {
				if o.Topic == topic {
					m.owned = append(m.owned, o.Partitions...)
				}
			}
			// A member whose copies do not decode (another version's
			// format) is balanced as cold: never fail a rebalance over a
			// preference.
			m.copies, _, _ = decodeMemberData(meta.UserData)
			ms = append(ms, m)
			refs = append(refs, member)
		})
		for i, ps := range planWarm(ms, topics[topic]) {
			plan.AddPartitions(refs[i], topic, ps)
		}
	}
	plan.AdjustCooperative(b)
	return plan
}

// warmMember is what the leader knows of one member.
type warmMember struct {
	generation int32
	owned      []int32
	// copies is the changelog offset (the next to read) the member's
	// store holds of each partition it holds anything of.
	copies map[int32]int64
}

// planWarm assigns partitions 0..n-1 to the members (in the order
// franz-go gives them: by instance id, then member id), returning each
// member's partitions in order. See the comment at the top of the file.
func planWarm(members []warmMember, n int32) [][]int32 {
	out := make([][]int32, len(members))
	if len(members) == 0 || n <= 0 {
		return out
	}
	m := int32(len(members))
	base, extra := n/m, n%m
	// room reports whether member i can take one more partition, and
	// take counts it.
	count := make([]int32, len(members))
	room := func(i int) bool { return count[i] < base || count[i] == base && extra > 0 }
	take := func(i int, p int32) {
		if count[i] == base {
			extra--
		}
		count[i]++
		out[i] = append(out[i], p)
	}
	assigned := make([]bool, n)

	// Stickiness: only claims of the newest generation count, as in
	// KIP-792 (a member that missed rebalances may still claim a
	// partition another owns now).
	newest := map[int32]int32{}
	for _, mb := range members {
		for _, p := range mb.owned {
			if g, ok := newest[p]; !ok || mb.generation > g {
				newest[p] = mb.generation
			}
		}
	}
	// Keep owned partitions up to the base share first, then the extra
	// slots, so that an overloaded member's surplus does not take an
	// extra slot another member needs for its own.
	for pass := range 2 {
		for i, mb := range members {
			for _, p := range slices.Sorted(slices.Values(mb.owned)) {
				if p < 0 || p >= n || assigned[p] || mb.generation < newest[p] {
					continue
				}
				if pass == 0 && count[i] >= base || !room(i) {
					continue
				}
				assigned[p] = true
				take(i, p)
			}
		}
	}

	// Warmth: the free partitions, those with the most caught-up copy
	// first, each to the member with room and the best copy.
	type free struct {
		p    int32
		best int64 // -1: nobody holds a copy
	}
	var frees []free
	for p := range n {
		if assigned[p] {
			continue
		}
		f := free{p: p, best: -1}
		for _, mb := range members {
			if o, ok := mb.copies[p]; ok {
				f.best = max(f.best, o)
			}
		}
		frees = append(frees, f)
	}
	slices.SortStableFunc(frees, func(a, b free) int {
		switch {
		case (a.best >= 0) != (b.best >= 0):
			if a.best >= 0 {
				return -1
			}
			return 1
		default:
			return int(a.p - b.p)
		}
	})
	for _, f := range frees {
		best := -1
		for i, mb := range members {
			if !room(i) {
				continue
			}
			if best < 0 || warmer(mb, count[i], members[best], count[best], f.p) {
				best = i
			}
		}
		take(best, f.p)
	}
	for i := range out {
		slices.Sort(out[i])
	}
	return out
}

// warmer reports whether member a (holding ca partitions so far) is a
// better owner for p than b (holding cb): the more caught-up copy, then
// the fewer partitions, then the earlier member.
func warmer(a warmMember, ca int32, b warmMember, cb int32, p int32) bool {
	oa, okA := a.copies[p]
	ob, okB := b.copies[p]
	if !okA {
		oa = -1
	}
	if !okB {
		ob = -1
	}
	if oa != ob {
		return oa > ob
	}
	return ca < cb
}

// The member data in the metadata's user data: a version byte, the
// count, then (partition, offset) pairs of the copies, all as uvarints;
// version 2 adds the liveness address (a uvarint length and the bytes,
// possibly empty). A member of an older version reads version 2 as
// undecodable and balances the member as cold until it is upgraded too.
const (
	copiesVersion     = 1
	memberDataVersion = 2
)

// maxCopies bounds what a member may advertise (Kafka's partition counts
// are far below it), and maxLivenessAddr its liveness address.
const (
	maxCopies       = 1 << 16
	maxLivenessAddr = 255
)

func encodeMemberData(copies map[int32]int64, liveness string) []byte {
	b := []byte{memberDataVersion}
	b = binary.AppendUvarint(b, uint64(len(copies)))
	for _, p := range slices.Sorted(maps.Keys(copies)) {
		b = binary.AppendUvarint(b, uint64(p))
		b = binary.AppendUvarint(b, uint64(max(0, copies[p])))
	}
	b = binary.AppendUvarint(b, uint64(len(liveness)))
	return append(b, liveness...)
}

var errCopies = errors.New("malformed copies in the member metadata")

// decodeMemberData reads either version: the copies and, from version 2,
// the liveness address.
func decodeMemberData(b []byte) (map[int32]int64, string, error) {
	if len(b) == 0 {
		return nil, "", nil
	}
	version := b[0]
	if version != copiesVersion && version != memberDataVersion {
		return nil, "", fmt.Errorf("%w: version %d, want %d or %d", errCopies, b[0], copiesVersion, memberDataVersion)
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	count, ok := next()
	if !ok || count > maxCopies {
		return nil, "", fmt.Errorf("%w: bad count", errCopies)
	}
	out := make(map[int32]int64, count)
	for range count {
		p, ok1 := next()
		o, ok2 := next()
		if !ok1 || !ok2 || p > 1<<31-1 || o > 1<<63-1 {
			return nil, "", fmt.Errorf("%w: truncated or out of range", errCopies)
		}
		out[int32(p)] = int64(o)
	}
	var addr string
	if version == memberDataVersion {
		n, ok := next()
		if !ok || n > maxLivenessAddr || n > uint64(len(b)) {
			return nil, "", fmt.Errorf("%w: bad liveness address", errCopies)
		}
		addr, b = string(b[:n]), b[n:]
	}
	if len(b) != 0 {
		return nil, "", fmt.Errorf("%w: %d trailing bytes", errCopies, len(b))
	}
	return out, addr, nil
}

// copies returns the changelog offset the store holds of each partition
// it holds anything of, for the join metadata. A partition whose offset
// cannot be read is left out: the member is then cold for it.
func (s *Sequencer) copies() map[int32]int64 {
	out := map[int32]int64{}
	for p := range s.cfg.Store.Partitions() {
		o, ok, err := s.cfg.Store.Offset(p)
		if err != nil {
			s.log.Warn("read a partition's offset for the group's balancer", "partition", p, "err", err)
			continue
		}
		if ok {
			out[p] = o
		}
	}
	return out
}

// synced notes the whole assignment of the session's latest sync (the
// warm balancer's, see onAssigned).
func (s *Sequencer) synced(a map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncedAssignment = map[int32]bool{}
	for _, p := range a[s.cfg.Topics.Mutations] {
		s.syncedAssignment[p] = true
	}
}

// dropUnassignedLocked forgets the owned partitions that the latest sync
// did not assign, as onRevoked would have; s.mu is held. franz-go's
// GroupTransactSession calls OnPartitionsRevoked once per transaction:
// a second cooperative revocation before the session's next End (two
// rebalances in a row while instances join) never reaches the callback,
// and the instance would keep counting, serving reads of and
// checkpointing a partition another instance owns. The session aborts
// its next commit after the first revocation anyway, so nothing of the
// dropped partition is committed by this instance.
func (s *Sequencer) dropUnassignedLocked() {
	if s.syncedAssignment == nil {
		return // not the warm balancer's protocol: only the callbacks tell
	}
	var gone []int32
	for p := range s.owned {
		if !s.syncedAssignment[p] {
			gone = append(gone, p)
			delete(s.owned, p)
			delete(s.needRestore, p)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		s.log.Info("partitions revoked", "partitions", gone, "by", "sync")
	}
}
