package sequencer_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/sequencer"
)

// TestIntegrationLiveOwnerRemoved: a removal from the group of an owner
// that is alive (what a liveness watcher that misjudged a connection
// would do) is a rebalance and nothing worse. Three times, while a has a
// transaction open under load, the test removes a with the admin
// LeaveGroup by its instance id, as liveness.go does: a's open
// transaction can no longer commit, b may take a's partitions, a rejoins
// as a new member. The exactly-once invariants hold, and neither
// instance's liveness removed the other (both were alive).
func TestIntegrationLiveOwnerRemoved(t *testing.T) {
	r := newTakeoverEnv(t, 4, 23)
	a := newSeqProc(t, r.e, "a")
	b := newSeqProc(t, r.e, "b", "--standbys", "4")
	a.Start(r.ctx)
	b.Start(r.ctx)
	r.startLoad()
	r.waitOwningAndWatching(a, b)
	group := r.e.prefix + sequencer.DefaultGroup
	instance := a.instanceID(r.ctx)
	txnID := group + "-" + instance
	adm := kadm.NewClient(r.e.cl)
	for i := range 3 {
		before, decided := a.assignments(), r.cl.outcomes()
		canontest.Wait(t, r.ctx, fmt.Sprintf("removal %d of a, live, in an open transaction", i+1), func() (bool, error) {
			d, err := adm.DescribeTransactions(r.ctx, txnID)
			if err != nil {
				return false, err
			}
			if tx, ok := d[txnID]; !ok || tx.Err != nil || tx.State != "Ongoing" {
				return false, nil
			}
			resp, err := adm.LeaveGroup(r.ctx, kadm.LeaveGroup(group).InstanceIDs(instance).Reason("test: a false removal of a live owner"))
			if err == nil {
				err = resp.Error()
			}
			return err == nil, err
		})
		a.waitRejoined(r.ctx, before)
		r.waitOwningAndWatching(a, b)
		canontest.Wait(t, r.ctx, "decisions after the removal", func() (bool, error) {
			return r.cl.outcomes() >= decided+300, nil
		})
	}
	checkMetricZero(t, a, "canon_sequencer_liveness_removals_total")
	checkMetricZero(t, b, "canon_sequencer_liveness_removals_total")
	r.g.finish()
	finishAndCheck(t, r.ctx, r.e, r.g, r.cl, a, b)
}
