package pipelines

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/canon-sync/canon/internal/kafka"
	"github.com/canon-sync/canon/model"
	"github.com/canon-sync/canon/schemas"
)

// Defaults of Config.
const (
	// DefaultIdleTimeout is how long a job waits for the next outcome of
	// what it produced before it gives up.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultClientGroup is the client group of the mutations a job makes
	// itself (branch.create, a snapshot's puts).
	DefaultClientGroup = "canon-pipeline"
)

// Config is what every job of the package needs.
type Config struct {
	// Kafka are the brokers and client options. The jobs are trusted
	// tools: what they write to canon.mutations carries no principal.
	Kafka kafka.ClientConfig
	// Principal is who runs the job (e.g. user:ann). Every mutation a job
	// sends records it with the job's kind and start time (schemas.Job),
	// and a re-sent one the mutation it re-sends (schemas.Origin), so
	// that the history tells a rebased branch's mutations from their
	// sources.
	Principal string
	// Topics are Canon's topic names; zero fields take the defaults.
	Topics kafka.TopicNames
	// Registry holds the mutators of in-memory decisions (dry runs and
	// in-memory replays); default model.NewRegistry(). Jobs that go
	// through Kafka are decided by the sequencers' registry: give this
	// one the same mutators, or a dry run decides differently.
	Registry *model.Registry
	// Bundles compiles the mutator bundles that in-memory decisions need:
	// a re-sent mutation is decided with the bundle its source version
	// recorded, read from the changelog. Nil: a job that meets a version
	// decided by a bundle fails, saying so.
	Bundles *model.BundleCache
	// Mutators, if set, decides every re-sent mutation of an in-memory
	// job (dry runs, in-memory replays) instead of the recorded bundles:
	// what the history would have been under other logic. Jobs through
	// Kafka refuse it: the sequencers decide with the deployed bundle.
	Mutators model.MutatorSet
	// Limits are the limits of decoded records and in-memory decisions;
	// zero fields take schemas.DefaultLimits.
	Limits schemas.Limits
	// IdleTimeout bounds the wait for the outcome of a produced mutation:
	// a job that sees no new outcome for this long fails (and can be run
	// again). Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Log receives the jobs' messages; nil discards them.
	Log *slog.Logger
	// Progress, if set, is called as a job advances (from the job's
	// goroutine; it must not block).
	Progress func(Progress)
}

// Progress is how far a job is in one of its phases.
type Progress struct {
	// Phase is "read" (the changelog), "decide" (in memory), "produce"
	// or "wait" (for the sequencer's outcomes).
	Phase string
	// Done and Total count records (read) or mutations (the others).
	Done, Total int64
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	if len(c.Kafka.Brokers) == 0 {
		return errors.New("pipelines: Config.Kafka.Brokers is empty: give at least one host:port")
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("pipeline: IdleTimeout is %s: use 0 for the default (%s) or a positive duration", c.IdleTimeout, DefaultIdleTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := kafka.DefaultTopicNames()
	if c.Topics.Mutations == "" {
		c.Topics.Mutations = def.Mutations
	}
	if c.Topics.Versions == "" {
		c.Topics.Versions = def.Versions
	}
	if c.Topics.Rejected == "" {
		c.Topics.Rejected = def.Rejected
	}
	if c.Registry == nil {
		c.Registry = model.NewRegistry()
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = func(Progress) {}
	}
	if c.Kafka.ClientID == "" {
		c.Kafka.ClientID = "canon-pipeline"
	}
	return c
}
