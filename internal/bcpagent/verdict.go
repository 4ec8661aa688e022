package bcpagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bcpgw/bcpgw/runtime"
)

// errBusy refuses a second publish (or answer) while the first's verdict
// is outstanding.
var errBusy = errors.New("still waiting for the verdict")

// awaitVerdict sends a response with send and waits up to VerdictWait
// for the gateway's verdict. got is false when the wait ended first (a
// Cat-3 item waits for a person; the turn ends before).
//
// send writes the message before awaitVerdict goes on, so the tool call
// never returns (and the turn's result is never written) before the
// response it sent. The wait for the verdict runs on its own goroutine
// under the session's context, not the turn's, so a verdict that comes
// after the turn ended is still received: it becomes a note for the
// model's next turn. One verdict per
// key (subscription or query) is outstanding at a time: the SDK matches
// verdicts to waiters per id in order, and a verdict held for review
// comes after later ones, so a second send would take the first's
// verdict. The second is refused to the model instead.
func (a *Agent) awaitVerdict(ctx context.Context, key, what string, send func() (*runtime.Pending, error)) (runtime.ValidationResult, bool, error) {
	if err := ctx.Err(); err != nil {
		// The send below uses the session's context: an interrupted turn
		// must not send anything.
		return runtime.ValidationResult{}, false, err
	}
	a.mu.Lock()
	if a.pending[key] {
		a.mu.Unlock()
		return runtime.ValidationResult{}, false, fmt.Errorf("%s: an earlier one is %w (it waits for an operator's review); you will be told it at the start of a later turn", what, errBusy)
	}
	a.pending[key] = true
	a.mu.Unlock()
	p, err := send()
	if err != nil {
		a.mu.Lock()
		delete(a.pending, key)
		a.mu.Unlock()
		return runtime.ValidationResult{}, true, err
	}

	type outcome struct {
		r   runtime.ValidationResult
		err error
	}
	done := make(chan outcome, 1)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		r, err := p.Wait(a.sessionCtx)
		a.mu.Lock()
		late := a.abandoned[key]
		delete(a.pending, key)
		delete(a.abandoned, key)
		if late && err == nil {
			a.notes = append(a.notes, fmt.Sprintf("The verdict on your earlier %s: %s", what, verdictText(r)))
		}
		a.mu.Unlock()
		done <- outcome{r, err}
	}()

	timer := time.NewTimer(a.cfg.VerdictWait)
	defer timer.Stop()
	select {
	case o := <-done:
		return o.r, true, o.err
	case <-timer.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	if a.pending[key] {
		a.abandoned[key] = true
		a.mu.Unlock()
		return runtime.ValidationResult{}, false, ctx.Err()
	}
	a.mu.Unlock()
	o := <-done // it finished just now
	return o.r, true, o.err
}

func verdictText(r runtime.ValidationResult) string {
	if r.Success {
		return "accepted: " + r.Detail
	}
	return "refused: " + r.Detail
}
