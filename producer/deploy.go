package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/auth"
	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/schemas"
	"github.com/canon-sync/canon/wire"
)

// partitioner puts a record where Kafka's default partitioner would
// (murmur2 of the key, schemas.Partition), except an org deploy's
// records, whose key is the org alone: they go to the partition they
// name, one to each.
func partitioner() kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			if r.Context == orgDeploy {
				return int(r.Partition)
			}
			return int(schemas.Partition(r.Key, int32(n)))
		}
	})
}

type orgDeployKey struct{}

// orgDeploy marks the records of an org deploy, which the partitioner
// sends to their own Partition.
var orgDeploy = context.WithValue(context.Background(), orgDeployKey{}, true)

// handleDeploy deploys a mutator bundle for a project (PUT
// /v1/projects/{org}/{project}/mutators) or an org (PUT
// /v1/orgs/{org}/mutators): the body is the bundle, a JavaScript module.
// The bundle is compiled first and refused with 400 invalid_bundle if it
// cannot run; otherwise a deploy/v1 record is written to the project's
// partition, or to every partition for an org, and the sequencer
// activates it there in order with the mutations.
func (p *Producer) handleDeploy(w http.ResponseWriter, r *http.Request) {
	org, project := r.PathValue("org"), r.PathValue("project")
	start := p.cfg.Now()
	claims, aerr := p.authorizeDeploy(r, org, project)
	if aerr != nil {
		p.fail(w, "deploy", aerr)
		return
	}
	src, aerr := readBundle(w, r)
	if aerr != nil {
		p.fail(w, "deploy", aerr)
		return
	}
	if p.cfg.CheckBundle == nil {
		p.fail(w, "deploy", &wire.Error{Status: http.StatusNotImplemented, Code: wire.CodeInvalidBundle,
			Message: "this server runs no JavaScript engine", Hint: "deploy to a Canon built with model/bundle"})
		return
	}
	names, err := p.cfg.CheckBundle(src)
	if err != nil {
		p.fail(w, "deploy", &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidBundle,
			Message: "the bundle cannot be deployed: " + err.Error(),
			Hint:    "fix the bundle (an ES module whose default export maps mutator names to functions) and deploy again"})
		return
	}
	slices.Sort(names)
	d := &schemas.Deploy{Org: org, Project: project, Hash: schemas.BundleHash(src), Bundle: string(src),
		Principal: claims.Principal(), DeployedAt: start.UnixMilli()}
	value, err := schemas.EncodeDeploy(d)
	if err != nil {
		p.fail(w, "deploy", &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidBundle, Message: err.Error()})
		return
	}
	written, err := p.produceDeploy(r.Context(), d, value)
	if err != nil {
		aerr := &wire.Error{Status: http.StatusServiceUnavailable, Code: wire.CodeUnavailable,
			Message: "the deploy could not be written to Kafka: " + err.Error(), Hint: "deploy again: the same bundle is activated once", RetryAfter: 1}
		p.fail(w, "deploy", aerr)
		return
	}
	p.cfg.Log.Info("bundle deployed", "org", org, "project", project, "bundle", d.Hash, "principal", d.Principal, "records", len(written))
	writeJSON(w, http.StatusOK, &wire.DeployResponse{Org: org, Project: project, Hash: d.Hash, Names: names, Written: written})
}

// authorizeDeploy checks the bearer token for the admin scope on the
// project, or on every project of the org for an org deploy.
func (p *Producer) authorizeDeploy(r *http.Request, org, project string) (*auth.Claims, *wire.Error) {
	if err := schemas.ValidateOrg("org", org); err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "org", Message: err.Error()}
	}
	reach := project
	if project == "" {
		reach = "*" // a token whose projects match every name
	} else if err := schemas.ValidateProject("project", project); err != nil {
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalid, Field: "project", Message: err.Error()}
	}
	claims, aerr := p.verify(r)
	if aerr != nil {
		return nil, aerr
	}
	if err := claims.Allow(org, reach, auth.ScopeAdmin); err != nil {
		aerr := authError(err)
		if project == "" {
			aerr.Hint = "an org deploy needs a token with the admin scope for all the org's projects (projects [\"*\"])"
		}
		return nil, aerr
	}
	return claims, nil
}

// bundleTypes are the content types a deploy takes.
var bundleTypes = []string{"application/javascript", "text/javascript", "application/octet-stream"}

// readBundle reads a deploy's body: at most schemas.MaxBundleBytes of
// UTF-8.
func readBundle(w http.ResponseWriter, r *http.Request) ([]byte, *wire.Error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !slices.Contains(bundleTypes, mt) {
			return nil, &wire.Error{Status: http.StatusUnsupportedMediaType, Code: wire.CodeUnsupportedMedia,
				Message: fmt.Sprintf("content type %q is not a JavaScript bundle", ct),
				Hint:    "send the bundle with 'Content-Type: application/javascript'"}
		}
	}
	if r.ContentLength > schemas.MaxBundleBytes {
		return nil, bundleTooLarge(r.ContentLength)
	}
	src, err := io.ReadAll(http.MaxBytesReader(w, r.Body, schemas.MaxBundleBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, bundleTooLarge(0)
	case err != nil:
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeMalformed, Message: "read body: " + err.Error()}
	case len(src) == 0:
		return nil, &wire.Error{Status: http.StatusBadRequest, Code: wire.CodeInvalidBundle, Message: "the body is empty",
			Hint: "send the bundle, a JavaScript module, as the body"}
	}
	if aerr := wire.CheckUTF8(src); aerr != nil {
		return nil, aerr
	}
	return src, nil
}

func bundleTooLarge(n int64) *wire.Error {
	msg := fmt.Sprintf("the bundle is over the limit of %d bytes", schemas.MaxBundleBytes)
	if n > 0 {
		msg = fmt.Sprintf("the bundle is %d bytes, over the limit of %d bytes", n, schemas.MaxBundleBytes)
	}
	return &wire.Error{Status: http.StatusRequestEntityTooLarge, Code: wire.CodeTooLarge, Message: msg,
		Hint: "minify the bundle, or leave large data out of it"}
}

// produceDeploy writes a deploy record: to the project's partition, or
// one to each partition for an org deploy.
func (p *Producer) produceDeploy(ctx context.Context, d *schemas.Deploy, value []byte) ([]wire.DeployedRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ProduceTimeout)
	defer cancel()
	headers := []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaDeployV1)}}
	key := schemas.DeployKey(d.Org, d.Project)
	var recs []*kgo.Record
	if d.Project != "" {
		recs = []*kgo.Record{{Key: key, Value: value, Headers: headers}}
	} else {
		n := p.cfg.Partitions
		if n <= 0 {
			counts, err := kafka.ReadPartitionCounts(ctx, p.cl, p.cfg.Topics)
			if err != nil {
				return nil, fmt.Errorf("read the partition count: %w", err)
			}
			n = counts.Mutations
		}
		for i := range n {
			recs = append(recs, &kgo.Record{Key: key, Value: value, Headers: headers, Partition: i, Context: orgDeploy})
		}
	}
	if err := p.send(ctx, recs, "", nil); err != nil {
		return nil, err
	}
	out := make([]wire.DeployedRecord, len(recs))
	for i, r := range recs {
		out[i] = wire.DeployedRecord{Partition: r.Partition, Offset: r.Offset}
	}
	return out, nil
}
