package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes shared by the subcommands.
const (
	exitOK     = 0
	exitFailed = 1 // the thing checked is invalid or refused (validate, run: definitions that do not load)
	exitUsage  = 2 // bad flags; for check, also definitions that do not load
	// exitNotRunning (3): a client command found no gateway on --state.
	programName = "bcpgw"
)

// exitError ends a command with a specific exit code. Its message, if any,
// has already been printed or is printed by execute.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   programName,
		Short: "Gateway for the Bandwidth-Constrained Protocol (BCP)",
		Long: `bcpgw sits between Reader agents that read untrusted content and clean
Controller agents, and lets information pass only through validated,
bandwidth-limited BCP channels declared in agent definitions.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newValidateCmd(), newCheckCmd(), newRunCmd(),
		newStatusCmd(), newAgentsCmd(), newPromptCmd(), newApprovalsCmd(), newApproveCmd(), newRejectCmd(),
		newEventsCmd(), newDeliveriesCmd(), newSubscriptionsCmd(), newBackupCmd(), newReportCmd(), newReloadCmd(), newDoctorCmd(), newNotifyCmd())
	addVersion(root)
	addCompletions(root)
	return root
}

// execute runs the command line and returns the process exit code.
func execute(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", programName, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "%s: %v\n", programName, err)
	return exitUsage
}
