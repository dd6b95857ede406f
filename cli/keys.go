package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/server"
)

func newKeysCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys kept in the database",
		Long: `Create, list and revoke API keys kept in the database.

Keys map to tenants. Every server sharing the database accepts a new key,
and refuses a revoked one, at once. The database keeps only a key's
SHA-256: a key is shown once, by create. Once any key exists, a server
requires a key on every /v1 request (and may listen on a non-loopback
address). FORGE_API_KEYS still works beside them on a single node.

On SQLite, run these while no forge serve owns the file; on PostgreSQL,
any time.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newKeysCreateCommand(), newKeysListCommand(), newKeysRevokeCommand())
	return cmd
}

func newKeysCreateCommand() *cobra.Command {
	var db, tenant, name string
	cmd := &cobra.Command{
		Use:   "create --tenant TENANT",
		Short: "Create a key and print it, alone, on stdout (it is not shown again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := forge.ValidateNewKey(tenant, name); err != nil {
				return err
			}
			s, err := server.OpenStore(cmd.Context(), db)
			if err != nil {
				return err
			}
			defer s.Close(cmd.Context())
			k, secret, err := s.CreateKey(cmd.Context(), tenant, name)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "created %s for tenant %s: keep the key now, it is not shown again\n", k.ID, k.Tenant)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", defaultDB, dbFlagHelp)
	f.StringVar(&tenant, "tenant", "", "tenant the key belongs to (required)")
	f.StringVar(&name, "name", "", "a note saying what the key is for")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

func newKeysListCommand() *cobra.Command {
	var db, tenant string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List keys (never their secrets), revoked ones too",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				tenant = forge.AllTenants
			} else if err := forge.ValidTenant(tenant); err != nil {
				return err
			}
			s, err := server.OpenStore(cmd.Context(), db)
			if err != nil {
				return err
			}
			defer s.Close(cmd.Context())
			var all []*forge.APIKey
			opts := forge.ListOptions{Limit: 1000}
			for {
				page, next, err := s.ListKeys(cmd.Context(), tenant, opts)
				if err != nil {
					return err
				}
				all = append(all, page...)
				if next == "" {
					break
				}
				opts.Cursor = next
			}
			if asJSON {
				if all == nil {
					all = []*forge.APIKey{}
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			return printKeys(cmd.OutOrStdout(), all)
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", defaultDB, dbFlagHelp)
	f.StringVar(&tenant, "tenant", "", "only this tenant's keys (default: every tenant's, which on PostgreSQL needs an administrator's URL)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printKeys(w io.Writer, keys []*forge.APIKey) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tNAME\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = k.RevokedAt.Format(time.RFC3339)
		}
		name := k.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, name, k.CreatedAt.Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

func newKeysRevokeCommand() *cobra.Command {
	var db, tenant string
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a key: every server refuses it at once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tenant == "" {
				tenant = forge.AllTenants
			} else if err := forge.ValidTenant(tenant); err != nil {
				return err
			}
			s, err := server.OpenStore(cmd.Context(), db)
			if err != nil {
				return err
			}
			defer s.Close(cmd.Context())
			if err := s.RevokeKey(cmd.Context(), tenant, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", defaultDB, dbFlagHelp)
	f.StringVar(&tenant, "tenant", "", "the key's tenant (default: any, which on PostgreSQL needs an administrator's URL)")
	return cmd
}

func newMigrateCommand() *cobra.Command {
	var db string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the database schema, then exit",
		Long: `Create or upgrade the database schema, then exit.

Every command that opens the database migrates it when it may, so this is
only needed on PostgreSQL when Forge itself runs as an unprivileged role:
run it once per upgrade with a superuser's URL (or a role with CREATEROLE),
which also creates Forge's roles (forge_owner, forge_runtime, forge_lookup);
then give forge serve a login role that is a member of forge_runtime.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := server.OpenStore(cmd.Context(), db)
			if err != nil {
				return err
			}
			if err := s.Close(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s is up to date\n", server.DisplayDB(db))
			return nil
		},
	}
	cmd.Flags().StringVar(&db, "db", defaultDB, dbFlagHelp)
	return cmd
}
