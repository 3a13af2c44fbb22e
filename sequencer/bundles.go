package sequencer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/store"
)

// deploy decides a deploy/v1 record in order with the mutations of its
// partition: from the next record on, its scope's mutations are decided
// with the bundle. The activation goes to canon.versions in the same
// transaction, and to the store after the commit, like a version. A
// deploy that cannot take effect is a rejected record, never a stall.
func (s *Sequencer) deploy(ctx context.Context, sess *kgo.GroupTransactSession, b *batch, r *kgo.Record, schema string) (string, error) {
	d, err := schemas.DecodeDeploy(schema, r.Value)
	if err != nil {
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.RejectReason(err), Message: err.Error(), Schema: schema, Value: prefix(r.Value)})
		return "rejected", nil
	}
	if want := schemas.DeployKey(d.Org, d.Project); string(r.Key) != string(want) {
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonKeyMismatch, Schema: schema,
			Message: fmt.Sprintf("record key %q is not the deploy key %q: key a deploy by org/project, or by the org alone for an org deploy", r.Key, want)})
		return "rejected", nil
	}
	if d.Project != "" {
		if want := schemas.Partition(r.Key, s.partitions); want != r.Partition {
			s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonKeyMismatch, Schema: schema,
				Message: fmt.Sprintf("project %s/%s belongs to partition %d, not %d: produce a project deploy with Kafka's default (murmur2) partitioner", d.Org, d.Project, want, r.Partition)})
			return "rejected", nil
		}
	}
	if s.cfg.Bundles == nil {
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonBadBundle, Schema: schema,
			Message: fmt.Sprintf("bundle %s of %s: this sequencer runs no JavaScript engine (Config.Bundles is nil)", d.Hash, scopeName(d.Org, d.Project))})
		return "rejected", nil
	}
	cur, err := s.decider.Deployed(r.Partition, d.Org, d.Project)
	if err != nil {
		return "", fmt.Errorf("deployed bundle of %s: %w", scopeName(d.Org, d.Project), err)
	}
	if cur != nil && cur.Hash() == d.Hash {
		return "duplicate", nil // the active bundle again: nothing changes
	}
	// An org deploy comes to every partition: compile it once (the
	// decoder checked that d.Hash is the bundle's hash). Compiling it for
	// each partition cost an engine start and esbuild's transform each,
	// on the transaction's critical path.
	set, err := s.cfg.Bundles.Get(d.Hash, func() ([]byte, error) { return []byte(d.Bundle), nil })
	if err != nil {
		if inner := errors.Unwrap(err); inner != nil {
			err = inner // the compile error, without Get's "compile bundle HASH"
		}
		s.reject(ctx, sess, b, r, &schemas.Rejected{Reason: schemas.ReasonBadBundle, Schema: schema,
			Message: fmt.Sprintf("bundle %s of %s does not compile: %v", d.Hash, scopeName(d.Org, d.Project), err)})
		return "rejected", nil
	}
	d.Source = &schemas.SourceRef{Partition: r.Partition, Offset: r.Offset}
	d.ActivatedAt = r.Timestamp.UnixMilli()
	value, err := schemas.EncodeDeploy(d)
	if err != nil {
		return "", fmt.Errorf("encode activation of bundle %s of %s: %w", d.Hash, scopeName(d.Org, d.Project), err)
	}
	s.decider.Activate(r.Partition, d.Org, d.Project, set)
	kr := &kgo.Record{Topic: s.cfg.Topics.Versions, Partition: r.Partition, Key: r.Key, Value: value,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaDeployV1)}}}
	b.pending = append(b.pending, pendingRec{rec: store.Record{Deploy: d}, kr: kr})
	sess.Produce(ctx, kr, b.promise)
	s.log.Info("bundle activated", "scope", scopeName(d.Org, d.Project), "bundle", d.Hash, "partition", r.Partition, "offset", r.Offset)
	return "deployed", nil
}

func scopeName(org, project string) string {
	if project == "" {
		return "org " + org
	}
	return org + "/" + project
}

// storeBundles answers the Decider with the store's committed deploys,
// compiled once per hash.
type storeBundles struct {
	st    *store.Store
	cache *model.BundleCache
	reg   *model.Registry
}

func (sb *storeBundles) Deployed(p int32, org, project string) (model.MutatorSet, error) {
	d, ok, err := sb.st.Deployment(p, org, project)
	if err != nil || !ok {
		return nil, err
	}
	set, err := sb.cache.Get(d.Hash, func() ([]byte, error) {
		src, ok, err := sb.st.Bundle(p, org, d.Hash)
		if err == nil && !ok {
			err = errors.New("its source is missing from the store")
		}
		return src, err
	})
	if err != nil {
		// It compiled when it was activated: a later build or budget
		// refuses it. Its mutations become errors, the partition goes on.
		return &unavailable{hash: d.Hash, err: err, reg: sb.reg}, nil
	}
	return set, nil
}

// CodeBundleUnavailable is the error code of a mutation whose project's
// active bundle cannot be compiled by this instance.
const CodeBundleUnavailable = "bundle_unavailable"

// unavailable is an active bundle this instance cannot compile: every
// mutator other than the registry's fails with the reason.
type unavailable struct {
	hash string
	err  error
	reg  *model.Registry
}

func (u *unavailable) Hash() string { return u.hash }

func (u *unavailable) Mutator(name string) (model.Mutator, bool) {
	if _, ok := u.reg.Lookup(name); ok {
		return nil, false
	}
	return func(model.Tx, json.RawMessage) error {
		return &model.CodedError{Code: CodeBundleUnavailable, Err: fmt.Errorf("the active bundle %s cannot run: %w", u.hash, u.err)}
	}, true
}
