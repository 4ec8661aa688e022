package main

import (
	"context"
	"path/filepath"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/internal/tui"
)

// runApprovalsUI runs the interactive queue until the reviewer quits. It
// starts even when the gateway is not running, says so, and connects
// when it comes up.
func runApprovalsUI(cmd *cobra.Command, state string) error {
	if err := requireState(state); err != nil {
		return err
	}
	path := filepath.Join(state, control.SocketName)
	m := tui.New(tui.Config{
		State: state,
		Dial: func(ctx context.Context) (tui.Conn, error) {
			cl, err := control.Dial(ctx, path)
			if err != nil {
				return nil, err
			}
			return cl, nil
		},
	})
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(cmd.Context()),
		tea.WithInput(cmd.InOrStdin()), tea.WithOutput(cmd.OutOrStdout()))
	_, err := p.Run()
	return err
}
