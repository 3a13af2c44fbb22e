package sequencer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fenceGoneOwners fences, as soon as partitions are assigned, the open
// transactions on them of instances that are no longer in the group.
//
// A dead owner's open transaction holds, besides its changelog records,
// the group's offset commit of the partition (KIP-447). Until it ends,
// the broker answers the new owner's offset fetch UNSTABLE_OFFSET_COMMIT,
// and franz-go waits a fixed second before asking again: measured, that
// second was half of a standby's takeover after a SIGKILL. The restore
// fences the same transactions (fenceAbandoned), but only after the
// fetch has been answered. Fencing here, before onAssigned returns and
// franz-go fetches the offsets, saves that second.
//
// It fences only when every member of the group is static (as `canon
// serve` instances are): the group then names every live instance, and a
// transaction of any other instance of this group is abandoned. With
// dynamic members the restore keeps deciding, with its grace period.
// Errors are logged: the restore fences again.
func (s *Sequencer) fenceGoneOwners(ctx context.Context, cl *kgo.Client, ps []int32) {
	if len(ps) == 0 || !s.static {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	n, err := s.fenceGone(ctx, cl, ps)
	if err != nil {
		s.log.Warn("fence the open transactions of instances that left the group, at assignment; the restore tries again",
			"partitions", ps, "err", err)
		return
	}
	if n > 0 {
		s.log.Info("fenced open transactions of instances that left the group, at assignment",
			"partitions", ps, "transactions", n, "took", time.Since(start))
	}
}

func (s *Sequencer) fenceGone(ctx context.Context, cl *kgo.Client, ps []int32) (int, error) {
	adm := kadm.NewClient(cl)
	topic := s.cfg.Topics.Versions
	set := kadm.TopicsSet{topic: {}}
	for _, p := range ps {
		set[topic][p] = struct{}{}
	}
	producers, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		return 0, fmt.Errorf("describe the producers of %s%v: %w", topic, ps, err)
	}
	var open []int64
	producers.EachProducer(func(d kadm.DescribedProducer) {
		if d.CurrentTxnStartOffset >= 0 {
			open = append(open, d.ProducerID)
		}
	})
	if len(open) == 0 {
		return 0, nil
	}
	txns, err := adm.ListTransactions(ctx, open, []string{"Ongoing"})
	if err != nil {
		return 0, fmt.Errorf("list the transactions of producers %v: %w", open, err)
	}
	groups, err := adm.DescribeGroups(ctx, s.cfg.Group)
	if err != nil {
		return 0, fmt.Errorf("describe group %s: %w", s.cfg.Group, err)
	}
	members := map[string]bool{}
	for _, m := range groups[s.cfg.Group].Members {
		if m.InstanceID == nil {
			return 0, nil // a dynamic member: the restore decides, with its grace
		}
		members[*m.InstanceID] = true
	}
	prefix := s.cfg.Group + "-"
	n := 0
	for _, tx := range txns.Sorted() {
		instance, ok := strings.CutPrefix(tx.TxnID, prefix)
		if !ok || instance == s.cfg.InstanceID || members[instance] {
			continue
		}
		if err := s.fence(ctx, tx.TxnID); err != nil {
			return n, err
		}
		s.m.fenced.Inc()
		n++
	}
	return n, nil
}
