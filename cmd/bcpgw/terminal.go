package main

import (
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	// Before Bubble Tea's init: no command queries the terminal unless
	// it opens an interactive screen (interactiveTerminal).
	"github.com/bcpgw/bcpgw/internal/quietterm"
)

// interactiveTerminal readies an interactive screen (the approval
// queue): it refuses with refusal (exit 2) when standard input and
// output are not both a terminal, and otherwise lets the screen's styles
// ask the terminal about itself, now rather than once the screen reads
// the keyboard. Plain commands never call it, so they never send a
// terminal query (which stalls for seconds where none is answered).
func interactiveTerminal(cmd *cobra.Command, refusal string) error {
	if !isTerminal(cmd.InOrStdin()) || !isTerminal(cmd.OutOrStdout()) {
		return &exitError{code: exitUsage, msg: refusal}
	}
	quietterm.Interactive()
	return nil
}

// isTerminal reports whether x is a file open on a terminal.
func isTerminal(x any) bool {
	f, ok := x.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
