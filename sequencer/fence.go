package sequencer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// InstanceFile is the file of a data directory that keeps the instance id
// of the sequencer that uses it (see LoadInstanceID).
const InstanceFile = "sequencer-instance"

// LoadInstanceID returns the instance id kept in dir, creating it (the
// host name and a random suffix) on first use. A process restarted on the
// same data directory is then the same instance: its transactional id
// fences the transaction its predecessor left open at once, and its static
// group membership gets its partitions back without a rebalance.
//
// Two running instances must never share an id: a copied data directory
// must lose this file, or be given another id with Config.InstanceID.
func LoadInstanceID(dir string) (string, error) {
	path := filepath.Join(dir, InstanceFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := checkInstanceID(id); err != nil {
			return "", fmt.Errorf("instance id in %s: %w (delete the file to get a new one)", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read the instance id: %w", err)
	}
	id := newInstanceID()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s for the instance id: %w", dir, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write the instance id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write the instance id: %w", err)
	}
	return id, nil
}

// validInstanceRune reports whether Kafka accepts r in a group instance
// id.
func validInstanceRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_'
}

func newInstanceID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if validInstanceRune(r) {
			return r
		}
		return '-'
	}, host)
	var b [3]byte
	_, _ = rand.Read(b[:])
	if host == "" {
		host = "sequencer"
	}
	return host + "-" + hex.EncodeToString(b[:])
}

// checkInstanceID refuses ids that Kafka refuses as a group instance id
// (at most 249 characters of letters, digits, '.', '_' and '-').
func checkInstanceID(id string) error {
	if id == "" || len(id) > 249 {
		return fmt.Errorf("instance id %q: use 1 to 249 characters", id)
	}
	for _, r := range id {
		if !validInstanceRune(r) {
			return fmt.Errorf("instance id %q: use letters, digits, '.', '_' and '-' only", id)
		}
	}
	return nil
}

// fenceGrace is how long a transaction of a group member that is not
// known to be gone may stay open on a partition being restored before it
// is fenced: a live previous owner ends its transaction within a batch
// (milliseconds), so one open this long is stalled.
const fenceGrace = time.Second

// fenceAbandoned fences the transactions that keep canon.versions[p]
// from being stable, when they belong to instances of this group that
// are gone: a process killed with its transaction open leaves it to the
// broker's transaction timeout (30s and more), while initializing a
// producer with its transactional id aborts it at once. A transaction is
// fenced when its instance is no static member of the group any more, or
// when it has been seen open for fenceGrace while the group has dynamic
// members (whose ids the group does not show). Other producers'
// transactions are left to their timeout. It reports whether it fenced
// one; errors (a broker that does not know the requests, missing ACLs)
// leave the transactions to their timeout too.
func (s *Sequencer) fenceAbandoned(ctx context.Context, cl *kgo.Client, p int32) (bool, error) {
	adm := kadm.NewClient(cl)
	topic := s.cfg.Topics.Versions
	producers, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {p: {}}})
	if err != nil {
		return false, fmt.Errorf("describe the producers of %s[%d]: %w", topic, p, err)
	}
	var open []int64
	producers.EachProducer(func(d kadm.DescribedProducer) {
		if d.CurrentTxnStartOffset >= 0 {
			open = append(open, d.ProducerID)
		}
	})
	if len(open) == 0 {
		return false, nil
	}
	txns, err := adm.ListTransactions(ctx, open, []string{"Ongoing"})
	if err != nil {
		return false, fmt.Errorf("list the transactions of producers %v: %w", open, err)
	}
	groups, err := adm.DescribeGroups(ctx, s.cfg.Group)
	if err != nil {
		return false, fmt.Errorf("describe group %s: %w", s.cfg.Group, err)
	}
	members, dynamic := map[string]bool{}, false
	for _, m := range groups[s.cfg.Group].Members {
		if m.InstanceID == nil {
			dynamic = true
		} else {
			members[*m.InstanceID] = true
		}
	}
	prefix := s.cfg.Group + "-"
	fenced := false
	for _, tx := range txns.Sorted() {
		instance, ok := strings.CutPrefix(tx.TxnID, prefix)
		if !ok || instance == s.cfg.InstanceID || members[instance] {
			continue
		}
		key := fmt.Sprintf("%d/%d", p, tx.ProducerID)
		seen, ok := s.openSince[key]
		if !ok {
			seen = time.Now()
			s.openSince[key] = seen
		}
		if dynamic && time.Since(seen) < fenceGrace {
			continue
		}
		if err := s.fence(ctx, tx.TxnID); err != nil {
			return fenced, err
		}
		delete(s.openSince, key)
		s.m.fenced.Inc()
		s.log.Warn("fenced the open transaction of an instance that left the group, instead of waiting for its timeout",
			"partition", p, "transactional_id", tx.TxnID, "producer_id", tx.ProducerID)
		fenced = true
	}
	return fenced, nil
}

// fence initializes a producer with another instance's transactional id:
// the broker bumps its epoch and aborts its open transaction, and answers
// once the abort is complete. A transaction whose commit had begun is
// completed instead: nothing that may have committed is aborted.
func (s *Sequencer) fence(ctx context.Context, txnID string) error {
	cl, err := s.cfg.Kafka.Aux("fence").NewClient(kgo.TransactionalID(txnID), kgo.TransactionTimeout(s.cfg.TransactionTimeout))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("fence transactional id %s: %w", txnID, err)
	}
	return nil
}
