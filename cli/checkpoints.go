package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/canon-sync/canon/internal/changelog"
	"github.com/canon-sync/canon/internal/checkpoint"
	"github.com/canon-sync/canon/store"
)

// checkpointFlags are the --checkpoint-* flags of serve and dev.
type checkpointFlags struct {
	url      string
	every    int64
	interval time.Duration
	keep     int
	grace    time.Duration
}

func (f *checkpointFlags) register(cmd *cobra.Command, urlHelp string) {
	fs := cmd.Flags()
	fs.StringVar(&f.url, "checkpoint-url", "", urlHelp)
	fs.Int64Var(&f.every, "checkpoint-every", checkpoint.DefaultEvery,
		"a sequencer checkpoints a partition it owns after this many changelog records")
	fs.DurationVar(&f.interval, "checkpoint-interval", checkpoint.DefaultInterval,
		"and at the latest this long after its last checkpoint, if the partition changed")
	fs.IntVar(&f.keep, "checkpoint-keep", checkpoint.DefaultKeep, "checkpoints kept per partition (the newest)")
	fs.DurationVar(&f.grace, "checkpoint-grace", checkpoint.DefaultGrace,
		"an older checkpoint, and a file no kept checkpoint names, is deleted only after this long: the longest a restore may take")
}

// devCheckpointURL is canon dev's bucket: a directory under its data dir.
func devCheckpointURL(data string) string {
	return "file://" + filepath.ToSlash(filepath.Join(data, "checkpoints")) + "?create_dir=1"
}

// openCheckpoints opens the node's checkpoint bucket over st; nil when
// --checkpoint-url is empty.
func (n *node) openCheckpoints(ctx context.Context, st *store.Store) (*checkpoint.Bucket, error) {
	f := n.checkpoints
	if f == nil || f.url == "" {
		return nil, nil
	}
	if f.every < 0 || f.interval < 0 || f.keep < 0 || f.grace < 0 {
		return nil, usageError{fmt.Errorf("--checkpoint-every, --checkpoint-interval, --checkpoint-keep and --checkpoint-grace must not be negative")}
	}
	if !strings.Contains(f.url, "://") {
		return nil, usageError{fmt.Errorf("--checkpoint-url %q is not a URL: use file:///DIR or s3://BUCKET?region=R", f.url)}
	}
	return checkpoint.Open(ctx, checkpoint.Config{
		URL: f.url, Store: st, Topic: n.topics.Names.Versions, Keep: f.keep, Grace: f.grace,
		TempDir: n.dataDir, Log: n.log.With("component", "checkpoint"), Metrics: checkpoint.NewMetrics(n.registry),
	})
}

// checkpointRunner takes the checkpoints of the partitions seq owns.
func (n *node) checkpointRunner(k *checkpoint.Bucket, owned func() []int32, generation func() int32) (*checkpoint.Runner, error) {
	f := n.checkpoints
	return checkpoint.NewRunner(checkpoint.RunnerConfig{
		Bucket: k, Every: f.every, Interval: f.interval, Owned: owned, Generation: generation, Log: n.log,
		TopicID: func(ctx context.Context) (string, error) {
			kcfg := n.kcfg
			kcfg.ClientID = "canon-checkpoint"
			cl, err := kcfg.NewClient()
			if err != nil {
				return "", err
			}
			defer cl.Close()
			return changelog.TopicID(ctx, kadm.NewClient(cl), n.topics.Names.Versions)
		},
	})
}
