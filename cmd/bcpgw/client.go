package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/gateway"
	"github.com/bcpgw/bcpgw/gateway/control"
)

// exitNotRunning is the exit code of client commands when no gateway
// answers on the state directory's control socket.
const exitNotRunning = 3

// callTimeout bounds one request of a client command. A prompt may wait
// for its agent's session to start.
const callTimeout = 60 * time.Second

// stateFlag adds --state, defaulting to $BCPGW_STATE.
func stateFlag(cmd *cobra.Command, dst *string) {
	cmd.Flags().StringVar(dst, "state", os.Getenv("BCPGW_STATE"), "state directory of the running gateway (env BCPGW_STATE)")
}

// requireState refuses a client command without a state directory.
func requireState(state string) error {
	if state == "" {
		return &exitError{code: exitUsage, msg: "--state is required (or set BCPGW_STATE); make run uses --state .bcpgw-state"}
	}
	return nil
}

// dial connects to the gateway running on state. Errors are exitErrors
// that tell the operator what to do.
func dial(ctx context.Context, state string) (*control.Client, error) {
	if err := requireState(state); err != nil {
		return nil, err
	}
	cl, err := control.Dial(ctx, filepath.Join(state, control.SocketName))
	if errors.Is(err, control.ErrNotRunning) {
		return nil, &exitError{code: exitNotRunning, msg: err.Error()}
	}
	if err != nil {
		return nil, &exitError{code: exitFailed, msg: err.Error()}
	}
	return cl, nil
}

// withClient runs fn with a connection to the gateway and a context that
// ends on SIGINT or after callTimeout.
func withClient(cmd *cobra.Command, state string, fn func(ctx context.Context, cl *control.Client) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), callTimeout)
	defer cancel()
	cl, err := dial(ctx, state)
	if err != nil {
		return err
	}
	defer cl.Close()
	return apiError(fn(ctx, cl))
}

// reader is what the commands that only read (events, report, approvals
// list, deliveries list) ask: the running gateway (*control.Client) or,
// when none runs, its state file (*control.Local over a
// gateway.StateReader), answering alike.
type reader interface {
	Events(ctx context.Context, p control.EventsParams) (control.EventsPage, error)
	ApprovalsPage(ctx context.Context, p control.ApprovalsParams) (control.ApprovalsPage, error)
	Deliveries(ctx context.Context, p control.DeliveriesParams) (control.DeliveriesPage, error)
	Report(ctx context.Context, p control.ReportParams) (control.Report, error)
}

// withReader runs fn with the running gateway, as withClient does, or,
// when no gateway answers on state, with its state file opened read-only
// (for a post-mortem), saying so on stderr. Without a state file either,
// it fails as withClient does.
func withReader(cmd *cobra.Command, state string, fn func(ctx context.Context, r reader) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), callTimeout)
	defer cancel()
	return readFrom(ctx, cmd, state, fn)
}

// readFrom is withReader with the caller's context, without a timeout.
func readFrom(ctx context.Context, cmd *cobra.Command, state string, fn func(ctx context.Context, r reader) error) error {
	cl, err := dial(ctx, state)
	if err == nil {
		defer cl.Close()
		return apiError(fn(ctx, cl))
	}
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitNotRunning {
		return err
	}
	sr, oerr := gateway.OpenStateReader(state)
	if errors.Is(oerr, fs.ErrNotExist) {
		return err
	}
	if oerr != nil {
		return &exitError{code: exitFailed, msg: ee.msg + "; reading its state file instead failed: " + oerr.Error()}
	}
	defer sr.Close()
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: no gateway runs on %s: this is read from its state file %s, as the gateway left it, not from a running gateway\n",
		programName, state, sr.Path())
	return apiError(fn(ctx, control.NewLocal(sr)))
}

// apiError turns an error from the gateway into an exitError with its
// message, so the operator reads "approval item ... was already approved
// by ...", not a JSON-RPC code.
func apiError(err error) error {
	var e *control.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e) && e.Code == control.CodeInvalidParams:
		return &exitError{code: exitUsage, msg: e.Message}
	case errors.As(err, &e):
		return &exitError{code: exitFailed, msg: e.Message}
	case errors.Is(err, context.DeadlineExceeded):
		return &exitError{code: exitFailed, msg: fmt.Sprintf("the gateway did not answer within %s; the request may still complete (see bcpgw events)", callTimeout)}
	}
	return err
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
