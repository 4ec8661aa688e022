package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
)

func newBackupCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Copy the running gateway's state file to FILE, consistently",
		Long: `Asks the running gateway for a consistent copy of its state file
(bcpgw.db: the outbox, the approval queue, the events and the exposure
figures) at FILE, while it goes on working: one snapshot, compacted,
without the write-ahead log. FILE must not exist; it is created with mode
0600 (it holds everything the state file does), on the gateway's host, as
the gateway's user.

To restore, stop the gateway, replace STATE/bcpgw.db with the copy
(removing any bcpgw.db-wal and bcpgw.db-shm beside it) and start it again:
the deliveries that were pending in the copy are sent again, marked
redelivered if they had been sent.

With no gateway running, stop-and-copy is enough: a gateway that stopped
cleanly leaves everything in bcpgw.db (after a crash, copy bcpgw.db-wal
with it).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			return withClient(cmd, state, func(ctx context.Context, cl *control.Client) error {
				r, err := cl.Backup(ctx, path)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "Copied the state file to %s (%d bytes).\n", r.Path, r.Bytes)
				return nil
			})
		},
	}
	stateFlag(cmd, &state)
	return cmd
}
