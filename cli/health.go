package cli

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCmd checks a running Canon over HTTP. Container images without
// a shell or curl use it as their health check.
func newHealthCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check that a running Canon is ready (exit 0) or not (exit 1)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(url)
			if err != nil {
				return fmt.Errorf("check %s: %w", url, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(body)))
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/readyz", "readiness URL of the Canon process")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return cmd
}
