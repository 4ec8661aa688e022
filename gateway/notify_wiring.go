package gateway

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/notify"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// The gateway's side of notifications (bcpgw run --notify FILE): the
// notifier is made in New from Config.Notify, runs for as long as Run
// does, and reads the notify file again on every reload of the
// definitions (SIGHUP, bcpgw reload, a changed definition file). A notify
// file that no longer loads leaves the targets in force as they were,
// like a definitions directory that does not load.

// newNotifier makes the gateway's notifier (nil without Config.Notify).
func (g *Gateway) newNotifier() error {
	if g.cfg.Notify == nil {
		return nil
	}
	n, err := notify.New(notify.Config{
		Store: g.cfg.Store, Targets: g.cfg.Notify, Logger: g.log.Named("notify"), Clock: g.cfg.Clock,
		Metrics: g.metrics.notifyMetrics(), Decide: g.command("approvals"),
	})
	if err != nil {
		return err
	}
	g.notifier = n
	return nil
}

// runNotifier starts the notifier in a goroutine Run waits for.
func (g *Gateway) runNotifier(ctx context.Context) {
	if g.notifier == nil {
		return
	}
	g.spawn(func() {
		if err := g.notifier.Run(ctx); err != nil && ctx.Err() == nil {
			g.log.Error("notifications stopped", "error", err)
		}
	})
}

// reloadNotify reads the notify file again and puts its targets in
// force. It returns what changed, for the reload's summary ("" when
// nothing did). A file that does not load is logged and evented
// (reload_failed, code notify_invalid), and the targets stay.
func (g *Gateway) reloadNotify(by string) string {
	if g.notifier == nil || g.cfg.Notify.File == "" {
		return ""
	}
	file := g.cfg.Notify.File
	ts, err := notify.Load(file, os.Getenv)
	if err != nil {
		g.log.Error("notify file not reloaded: it does not load; the targets in force stay", "by", by, "file", file)
		for _, line := range strings.Split(err.Error(), "\n") {
			g.log.Error("  " + line)
		}
		g.event(store.Event{Kind: "reload_failed", Code: "notify_invalid", Ref: by, Detail: fmt.Sprintf("by %s: notify file: %v", by, err)})
		return "notify file not reloaded (it does not load; see the log)"
	}
	changed := g.notifier.Update(ts)
	if changed == "" {
		return ""
	}
	g.log.Info("notify targets reloaded", "by", by, "changes", changed)
	return "notify targets " + changed
}

// notifyMetrics is the notifier's share of the metrics (nil without).
func (m *Metrics) notifyMetrics() *notify.Metrics {
	if m == nil {
		return nil
	}
	return m.notify
}

// NotifyTest implements control.NotifyBackend: bcpgw notify test TARGET
// against the running gateway, which sends with its own environment's
// secrets. The test changes nothing (no cursor, no disabling) and is
// recorded as an operator action.
func (o *Operator) NotifyTest(ctx context.Context, by control.Peer, p control.NotifyTestParams) (control.NotifyTestResult, error) {
	if o.g.notifier == nil {
		return control.NotifyTestResult{}, control.Errorf(control.CodeInvalidParams, "this gateway sends no notifications: start it with bcpgw run --notify FILE, or give the file to bcpgw notify test --notify FILE")
	}
	t, r, err := o.g.notifier.Test(ctx, p.Target)
	if err != nil {
		return control.NotifyTestResult{}, control.Errorf(control.CodeInvalidParams, "%v", err)
	}
	res := NotifyTestResult(t, r)
	o.acted("operator_notify_test", "", by, fmt.Sprintf("test notification to %s (%s): %s", t.Name, t.Host(), r))
	return res, nil
}

// NotifyTestResult is the control API's view of a test notification.
func NotifyTestResult(t *notify.Target, r notify.Result) control.NotifyTestResult {
	res := control.NotifyTestResult{
		Target: t.Name, Host: t.Host(), Format: string(t.Format), Signed: t.Signed(),
		Status: r.Status, Outcome: string(r.Outcome), Summary: r.String(), Body: string(r.Body),
		DurationMS: r.Duration.Milliseconds(),
	}
	if r.Err != nil {
		res.Error = r.Err.Error()
	}
	return res
}
