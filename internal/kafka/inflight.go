package kafka

import "sync/atomic"

// Inflight counts, per partition of canon.mutations, the records that
// the producer of this process is writing (handed to the Kafka client,
// not yet acknowledged) and the offset after the last one Kafka
// acknowledged. A sequencer in the same process reads it to size its
// transactions by what is on its way to the partitions it owns: a
// transaction waits briefly for records known to be coming instead of
// leaving them to the next transaction, and does not wait when none are.
//
// It is a hint, never a source of truth: records written by other
// processes are not counted, and a count may lag the broker by the time
// between an acknowledgement reaching the Kafka client and the producer
// recording it. Nothing may depend on it for correctness.
type Inflight struct {
	parts []inflightPartition
}

type inflightPartition struct {
	writing atomic.Int64
	acked   atomic.Int64 // offset after the last acknowledged record; 0 when none
	_       [48]byte     // one cache line per partition: pushes and the sequencer touch them at once
}

// NewInflight returns counters for partitions partitions.
func NewInflight(partitions int32) *Inflight {
	return &Inflight{parts: make([]inflightPartition, max(partitions, 0))}
}

// Writing records that n records are handed to the Kafka client for
// partition p.
func (f *Inflight) Writing(p int32, n int) {
	if f == nil || p < 0 || int(p) >= len(f.parts) {
		return
	}
	f.parts[p].writing.Add(int64(n))
}

// Written records that n records of partition p given to Writing are
// answered: end is the offset after the last of them when Kafka
// acknowledged them, or 0 when the write failed.
func (f *Inflight) Written(p int32, n int, end int64) {
	if f == nil || p < 0 || int(p) >= len(f.parts) {
		return
	}
	pp := &f.parts[p]
	for {
		old := pp.acked.Load()
		if end <= old || pp.acked.CompareAndSwap(old, end) {
			break
		}
	}
	pp.writing.Add(-int64(n))
}

// Load returns how many records of partition p are being written, and
// the offset after the last acknowledged one (0 when none was).
func (f *Inflight) Load(p int32) (writing int64, acked int64) {
	if f == nil || p < 0 || int(p) >= len(f.parts) {
		return 0, 0
	}
	pp := &f.parts[p]
	return pp.writing.Load(), pp.acked.Load()
}

// Partitions returns the partition count the counters were made for.
func (f *Inflight) Partitions() int32 {
	if f == nil {
		return 0
	}
	return int32(len(f.parts))
}
