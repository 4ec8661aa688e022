package control

import (
	"context"
	"fmt"
)

// MethodNotifyTest sends a sample notification to one target of the
// gateway's notify file (bcpgw notify test TARGET), from the gateway,
// with the secrets of its environment, and returns the answer.
const MethodNotifyTest = "notify.test"

// NotifyBackend is the part of a Backend behind notify.test. It is
// optional: a Backend without it answers that the method is not found.
type NotifyBackend interface {
	NotifyTest(ctx context.Context, by Peer, p NotifyTestParams) (NotifyTestResult, error)
}

// NotifyTestParams are the params of notify.test.
type NotifyTestParams struct {
	Target string `json:"target"`
}

// NotifyTestResult is what a test notification got.
type NotifyTestResult struct {
	Target string `json:"target"`
	Host   string `json:"host"` // the URL's host only: its path may be a secret
	Format string `json:"format"`
	Signed bool   `json:"signed"`
	// Status is the HTTP status (0 without a response, see Error);
	// Outcome is ok, error, refused or gone, as in the metrics; Summary
	// says it in words.
	Status     int    `json:"status"`
	Outcome    string `json:"outcome"`
	Summary    string `json:"summary"`
	Body       string `json:"body,omitempty"` // the start of the response body, at most 4 KiB
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
}

// NotifyTest asks the gateway to send a test notification to target.
func (cl *Client) NotifyTest(ctx context.Context, target string) (NotifyTestResult, error) {
	var r NotifyTestResult
	err := cl.Call(ctx, MethodNotifyTest, NotifyTestParams{Target: target}, &r)
	return r, err
}

func (cc *conn) notifyCall(req *request) (any, error) {
	var p NotifyTestParams
	if err := decode(req.Params, &p); err != nil {
		return nil, err
	}
	if p.Target == "" {
		return nil, Errorf(CodeInvalidParams, `"target" is required`)
	}
	b, ok := cc.s.cfg.Backend.(NotifyBackend)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "no method %q", MethodNotifyTest)
	}
	r, err := b.NotifyTest(cc.ctx, cc.peer, p)
	if err != nil {
		return nil, fmt.Errorf("notify test: %w", err)
	}
	return r, nil
}
