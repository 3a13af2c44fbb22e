package history

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/canontest"
	"github.com/canon-sync/canon/schemas"
)

// TestBundleColumns projects versions decided by a deployed bundle and by
// a built-in: versions.bundle and mutations.bundle name the bundle of the
// first and are empty for the second, and the activation record in the
// changelog is skipped, not rejected.
func TestBundleColumns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFixture(t, ctx, 2)
	src := `export default { "note.add": (tx, a) => { tx.put("notes", a.id, {text: a.text}); } };`
	hash := schemas.BundleHash([]byte(src))
	d, err := schemas.EncodeDeploy(&schemas.Deploy{Org: "acme", Project: "doc", Hash: hash, Bundle: src, DeployedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	key := schemas.DeployKey("acme", "doc")
	if err := f.cl.ProduceSync(ctx, &kgo.Record{Topic: f.info.Names.Mutations, Key: key, Value: d,
		Partition: schemas.Partition(key, f.info.Partitions),
		Headers:   []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(schemas.SchemaDeployV1)}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1_700_000_000_000)
	f.produce(t, ctx, []mut{
		{schemas.Mutation{Org: "acme", Project: "doc", ClientGroup: "g", Client: "c", ID: 1, Name: "note.add",
			Args: json.RawMessage(`{"id":"a","text":"hi"}`)}, at},
		{schemas.Mutation{Org: "acme", Project: "doc", ClientGroup: "g", Client: "c", ID: 2, Name: "item.put",
			Args: json.RawMessage(`{"collection":"notes","id":"b","data":1}`)}, at},
	})
	f.runSequencer(t, ctx)
	runProjector(t, ctx, f.projectorConfig(t))
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".mutations FINAL", 2)
	waitCount(t, ctx, f, "SELECT count() FROM "+f.db+".versions FINAL", 2)
	want := [][]string{{"1", "note.add", hash}, {"2", "item.put", ""}}
	expectRows(t, "mutations", queryStrings(t, ctx, f, "SELECT toString(version), name, bundle FROM "+f.db+".mutations FINAL ORDER BY version"), want)
	expectRows(t, "versions", queryStrings(t, ctx, f, "SELECT toString(version), '', bundle FROM "+f.db+".versions FINAL ORDER BY version"),
		[][]string{{"1", "", hash}, {"2", "", ""}})
	if rs := canontest.ReadTopic(t, f.brokers, f.info.Names.Rejected); len(rs) != 0 {
		t.Errorf("%d rejected records, want none: the activation is not a record to reject", len(rs))
	}
}
