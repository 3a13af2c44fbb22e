package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/canon-sync/canon/schemas"
)

// Rejections: the mutations the sequencer rejected (a gap, an
// unauthorized client group …) are not in canon.versions but in
// canon.rejected, and a client asking what became of one must not be
// told "pending" forever. The store records them by (project, branch,
// client, id) in the project's partition: the sequencer after each
// committed transaction, a read replica from canon.rejected. A later
// version that records the same id wins (a gap's id resent in order).

// Rejection is why the sequencer rejected a mutation.
type Rejection struct {
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
	ExpectedID uint64 `json:"expectedId,omitempty"`
}

func rejectionKey(p int32, org, project, branch, client string, id uint64) []byte {
	b := appendBranchPrefix(make([]byte, 0, 64), p, kindRejection, org, project, branch)
	b = appendString(b, client)
	return binary.BigEndian.AppendUint64(b, id)
}

func rejectedOffsetKey(r int32) []byte {
	return metaKey(globalPartition, metaRejected+"/"+strconv.Itoa(int(r)))
}

// RecordRejections records rejected mutations in one synced batch. Records
// that name no mutation (it did not decode) or an incomplete one are
// skipped: nobody can ask for them. With next >= 0 it also records that
// partition r of canon.rejected is recorded below offset next
// (RejectedOffset), for a reader of that topic to resume from.
func (s *Store) RecordRejections(rejs []*schemas.Rejected, r int32, next int64) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, rej := range rejs {
		m := rej.Mutation
		if m == nil || validateProject(m.Org, m.Project) != nil || m.Client == "" || m.ID == 0 {
			continue
		}
		branch := m.Branch
		if branch == "" {
			branch = schemas.DefaultBranch
		}
		v, err := json.Marshal(Rejection{Reason: rej.Reason, Message: rej.Message, ExpectedID: rej.ExpectedID})
		if err != nil {
			return fmt.Errorf("record rejection of %s/%s client %s id %d: %w", m.Org, m.Project, m.Client, m.ID, err)
		}
		if err := b.Set(rejectionKey(s.PartitionOf(m.Org, m.Project), m.Org, m.Project, branch, m.Client, m.ID), v, nil); err != nil {
			return fmt.Errorf("record rejection of %s/%s client %s id %d: %w", m.Org, m.Project, m.Client, m.ID, err)
		}
	}
	if next >= 0 {
		if err := b.Set(rejectedOffsetKey(r), encodeUint64(uint64(next)), nil); err != nil {
			return fmt.Errorf("record offset %d of rejected partition %d: %w", next, r, err)
		}
	}
	if b.Empty() {
		return nil
	}
	if err := b.Commit(s.writeOpts()); err != nil {
		return fmt.Errorf("record %d rejections: %w", len(rejs), err)
	}
	return nil
}

// RejectedOffset returns the next offset of partition r of canon.rejected
// that RecordRejections has not recorded; ok is false when none was.
func (s *Store) RejectedOffset(r int32) (int64, bool, error) {
	o, ok, err := getOffset(s.db, rejectedOffsetKey(r))
	if err != nil {
		return 0, false, fmt.Errorf("read offset of rejected partition %d: %w", r, err)
	}
	return o, ok, nil
}

// Rejection returns why the sequencer rejected mutation id of client on a
// branch, if it did and the store learned of it. One point read.
func (s *Store) Rejection(org, project, branch, client string, id uint64) (Rejection, bool, error) {
	raw, found, err := get(s.db, rejectionKey(s.PartitionOf(org, project), org, project, branch, client, id))
	if err != nil || !found {
		return Rejection{}, false, wrapQuery("rejection", org, project, branch, err)
	}
	var rej Rejection
	if err := json.Unmarshal(raw, &rej); err != nil {
		return Rejection{}, false, wrapQuery("rejection", org, project, branch, fmt.Errorf("%w: rejection record: %w", ErrCorrupt, err))
	}
	return rej, true, nil
}
