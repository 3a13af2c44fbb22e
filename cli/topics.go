package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/canon-sync/canon/internal/kafka"
)

func newTopicsCmd(g *globalFlags) *cobra.Command {
	f := &kafkaFlags{}
	cmd := &cobra.Command{
		Use:   "topics",
		Short: "Create Canon's topics if missing and check them",
		Long: `Create canon.mutations, canon.versions and canon.rejected if they are missing,
with infinite retention, an explicit max.message.bytes and, where the cluster
has the brokers, 3 replicas with min.insync.replicas 2 and no unclean leader
election; check that canon.mutations and canon.versions have the same
partition count, and refuse topics whose settings can lose acknowledged
records.
Every canon process does this at start; this command does it alone.`,
		Example: `  canon topics --brokers localhost:9092 --topic-partitions 24`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			kcfg, err := f.clientConfig("canon-topics", log)
			if err != nil {
				return err
			}
			opts, err := kcfg.Opts()
			if err != nil {
				return usageError{err}
			}
			cl, err := kgo.NewClient(append(opts, kgo.RetryTimeout(10*time.Second))...)
			if err != nil {
				return err
			}
			defer cl.Close()
			info, err := kafka.EnsureTopics(cmd.Context(), cl, f.topicsConfig(), log)
			if err != nil {
				return kafka.ExplainConnError(err)
			}
			for _, name := range []string{info.Names.Mutations, info.Names.Versions, info.Names.Rejected} {
				state := "exists"
				for _, c := range info.Created {
					if c == name {
						state = "created"
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-28s %s\n", name, state)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "partitions: %d\n", info.Partitions)
			return nil
		},
	}
	f.register(cmd, "Kafka brokers, host:port, comma separated (required)")
	return cmd
}
