package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/canon-sync/canon/internal/auth"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage signing keys and issue access tokens",
		Long: `Canon's access tokens are JWTs signed with Ed25519 keys kept in a keyset file.
A token names an org, the projects it reaches (names or patterns such as
"team-*" or "*"), its scopes (read, write, admin) and its expiry.

Rotate keys by adding one with 'canon token keygen' (it signs new tokens
from then on), keeping the old one until its tokens have expired, then
removing it with 'canon token rmkey'.`,
	}
	cmd.AddCommand(newTokenKeygenCmd(), newTokenRmkeyCmd(), newTokenIssueCmd(), newTokenPublicCmd())
	return cmd
}

func newTokenKeygenCmd() *cobra.Command {
	var keys, kid string
	cmd := &cobra.Command{
		Use:     "keygen --keys FILE [--kid ID]",
		Short:   "Add a new signing key to a keyset file (created if missing)",
		Example: `  canon token keygen --keys /etc/canon/keys.json --kid 2026-11`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := auth.LoadKeyset(keys)
			if errors.Is(err, fs.ErrNotExist) {
				k, err = auth.NewKeyset(), nil
			}
			if err != nil {
				return err
			}
			if kid == "" {
				kid = time.Now().UTC().Format("2006-01-02T150405")
			}
			if err := k.Generate(kid); err != nil {
				return usageError{err}
			}
			if err := k.Save(keys); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added key %s to %s (keys: %v)\n", kid, keys, k.IDs())
			return nil
		},
	}
	cmd.Flags().StringVar(&keys, "keys", "", "keyset file (required)")
	cmd.Flags().StringVar(&kid, "kid", "", "key id (default: the current UTC time)")
	_ = cmd.MarkFlagRequired("keys")
	return cmd
}

func newTokenRmkeyCmd() *cobra.Command {
	var keys, kid string
	cmd := &cobra.Command{
		Use:   "rmkey --keys FILE --kid ID",
		Short: "Remove a key: tokens it signed stop being accepted",
		Long: `Remove a key from a keyset file: tokens it signed stop being accepted.

Running servers read their --keys file again every 2 seconds, and at once on
SIGHUP: within that time they refuse the key's tokens, also ones they had
verified before. Servers that verify with a public copy of the keyset need
that copy written again ('canon token public').`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := auth.LoadKeyset(keys)
			if err != nil {
				return err
			}
			if err := k.Remove(kid); err != nil {
				return usageError{err}
			}
			if len(k.IDs()) == 0 {
				return usageError{fmt.Errorf("%s is the last key of %s: add another with 'canon token keygen' first", kid, keys)}
			}
			if err := k.Save(keys); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed key %s from %s (keys: %v)\n", kid, keys, k.IDs())
			return nil
		},
	}
	cmd.Flags().StringVar(&keys, "keys", "", "keyset file (required)")
	cmd.Flags().StringVar(&kid, "kid", "", "key id (required)")
	_ = cmd.MarkFlagRequired("keys")
	_ = cmd.MarkFlagRequired("kid")
	return cmd
}

func newTokenPublicCmd() *cobra.Command {
	var keys, out string
	cmd := &cobra.Command{
		Use:   "public --keys FILE --out FILE",
		Short: "Write the public half of a keyset, for the services that only verify tokens",
		Long: `Write the keyset's public keys only (mode 0644). Give this file to the
services that verify tokens (--keys of canon serve); keep the full keyset,
which can sign, where tokens are issued.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := auth.LoadKeyset(keys)
			if err != nil {
				return err
			}
			if err := k.VerifyOnly().Save(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote the public keys %v to %s\n", k.IDs(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&keys, "keys", "", "keyset file (required)")
	cmd.Flags().StringVar(&out, "out", "", "file to write (required)")
	_ = cmd.MarkFlagRequired("keys")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func newTokenIssueCmd() *cobra.Command {
	var (
		keys    string
		c       auth.Claims
		subject string
		ttl     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "issue --keys FILE --subject WHO --org ORG [--projects P,…] [--scopes S,…] [--ttl D]",
		Short: "Issue an access token, printed on standard output",
		Example: `  canon token issue --keys keys.json --subject user:alice --org acme --projects roadmap,team-* --scopes read,write --ttl 24h
  curl -H "Authorization: Bearer $(canon token issue …)" …`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := auth.LoadKeyset(keys)
			if err != nil {
				return err
			}
			c.Subject = subject
			tok, err := k.Issue(c, ttl, time.Now())
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&keys, "keys", "", "keyset file (required)")
	f.StringVar(&subject, "subject", "", "the principal the token speaks for, e.g. user:alice (required)")
	f.StringVar(&c.Org, "org", "", "the org the token reaches (required)")
	f.StringSliceVar(&c.Projects, "projects", []string{"*"}, "project names or patterns")
	f.StringSliceVar(&c.Scopes, "scopes", []string{auth.ScopeRead}, "scopes: read, write, admin")
	f.DurationVar(&ttl, "ttl", 24*time.Hour, "lifetime")
	for _, name := range []string{"keys", "subject", "org"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// devKeyset loads DATA/keys.json, creating it with one key on first start.
func devKeyset(path string) (*auth.Keyset, error) {
	k, err := auth.LoadKeyset(path)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	k = auth.NewKeyset()
	if err := k.Generate("dev-" + time.Now().UTC().Format("20060102")); err != nil {
		return nil, err
	}
	if err := k.Save(path); err != nil {
		return nil, fmt.Errorf("save dev keyset: %w", err)
	}
	return k, os.Chmod(path, 0o600)
}
