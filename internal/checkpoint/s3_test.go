package checkpoint_test

import (
	"context"
	"errors"
	"testing"

	"gocloud.dev/blob"

	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestS3 runs checkpoints through the s3:// driver against the test
// environment's S3 server: incremental upload, restore to the
// changelog's state, a corrupt object skipped, and a manifest that is
// never overwritten.
func TestS3(t *testing.T) {
	s3 := testenv.NewS3(t)
	f := newFixture(t)
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, s3.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f.bucket = blob.PrefixedBucket(b, s3.Prefix(t))
	defer f.bucket.Close()
	k := f.open(checkpoint.Config{})
	f.write(2000)
	m1 := f.take(k)
	heads1 := f.gen.Heads()
	f.write(300)
	m2 := f.take(k)
	heads2 := f.gen.Heads()
	f.restore("s3-newest", topicID, f.next, m2.Offset, heads2)

	// Corrupt a file only the newest holds: the older one is restored.
	in1 := distinct(m1)
	var victim checkpoint.File
	for _, fl := range m2.Files {
		if !in1[fl.SHA256] && fl.Size > 0 {
			victim = fl
		}
	}
	data, err := f.bucket.ReadAll(ctx, "canon/files/"+victim.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/3] ^= 0x55
	if err := f.bucket.WriteAll(ctx, "canon/files/"+victim.SHA256, data, nil); err != nil {
		t.Fatal(err)
	}
	f.restore("s3-corrupt", topicID, f.next, m1.Offset, heads1)

	// The same writer again at the same offset: refused, not overwritten.
	if _, err := k.Take(ctx, part, checkpoint.TakeOptions{TopicID: topicID, Generation: 1}); !errors.Is(err, checkpoint.ErrExists) {
		t.Fatalf("second Take at one offset = %v; want ErrExists", err)
	}
}
