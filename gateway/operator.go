package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
)

// Operator is the gateway as the control socket serves it: it implements
// control.Backend, translating between the API's types and the gateway's,
// and mapping errors to the API's stable codes. Every operator action is
// also an event naming who acted.
type Operator struct {
	g *Gateway
}

var _ control.Backend = (*Operator)(nil)

// Operator returns the gateway's control.Backend.
func (g *Gateway) Operator() *Operator { return &Operator{g: g} }

// decider is who is on the other end of a control connection as the
// gateway records a decision: the one place where the socket's wire type
// (control.Peer, which also carries the gid) becomes store.Decider.
func decider(p control.Peer) store.Decider {
	return store.Decider{Name: p.User, UID: p.UID, PID: p.PID}
}

// acted records an operator's action.
func (o *Operator) acted(kind, agent string, by control.Peer, detail string) {
	o.g.event(store.Event{Time: o.g.now(), Kind: kind, Agent: agent, Detail: detail + " by " + decider(by).String()})
}

// Status implements control.Backend.
func (o *Operator) Status(ctx context.Context) (control.Status, error) {
	st := control.Status{AgentsDir: o.g.set.Load().Dir, StateFile: o.g.cfg.Store.Path(), Agents: map[string]int{}}
	all, err := o.g.sv.Agents(ctx)
	if err != nil {
		return st, err
	}
	for _, a := range all {
		st.Agents[string(a.State)]++
	}
	b, err := o.g.cfg.Store.BacklogCounts(ctx)
	if err != nil {
		return st, err
	}
	st.PendingApprovals, st.PendingDeliveries, st.ParkedDeliveries = b.Approvals, b.Deliveries, b.Parked
	st.LastEventSeq, err = o.g.cfg.Store.LastEventSeq(ctx)
	return st, err
}

// Agents implements control.Backend.
func (o *Operator) Agents(ctx context.Context) ([]control.Agent, error) {
	set := o.g.set.Load()
	states, err := o.g.sv.Agents(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]control.Agent, 0, len(states))
	for _, st := range states {
		d := set.Agent(st.Name)
		if d == nil {
			continue
		}
		a := control.Agent{
			Name: d.Name, Description: d.Description, Roles: roles(d), State: string(st.State), Autostart: d.Autostart,
			Held: st.Held, Session: st.Session, PID: st.PID, Since: st.Since, Crashes: st.Crashes, LastError: st.LastErr,
			RetryAt:  st.RetryAt,
			Channels: []control.Channel{},
		}
		for _, ch := range d.Channels {
			a.Channels = append(a.Channels, control.Channel{Peer: ch.Peer, Role: string(ch.Role), MaxCategory: int(ch.MaxCategory), BudgetBits: float64(ch.BudgetBits)})
		}
		out = append(out, a)
	}
	return out, nil
}

// roles are the sides an agent holds on its channels.
func roles(d *agents.Definition) []string {
	var c, r bool
	for _, ch := range d.Channels {
		c = c || ch.Role == agents.RoleController
		r = r || ch.Role == agents.RoleReader
	}
	out := []string{}
	if c {
		out = append(out, "controller")
	}
	if r {
		out = append(out, "reader")
	}
	return out
}

// agentError maps the supervisor's errors to the API's codes.
func agentError(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrNoAgent):
		return control.Errorf(control.CodeNotFound, "no agent named %q (see bcpgw agents)", name)
	case errors.Is(err, session.ErrAgentFailed):
		return control.Errorf(control.CodeAgentFailed, "%v", err)
	}
	return err
}

// StartAgent implements control.Backend.
func (o *Operator) StartAgent(ctx context.Context, by control.Peer, name string) error {
	if _, err := o.g.sv.Start(ctx, name); err != nil {
		return agentError(name, err)
	}
	o.acted("operator_start", name, by, "started")
	return nil
}

// StopAgent implements control.Backend.
func (o *Operator) StopAgent(ctx context.Context, by control.Peer, name string) error {
	if err := o.g.sv.Stop(ctx, name, "stopped by "+decider(by).String()); err != nil {
		return agentError(name, err)
	}
	o.acted("operator_stop", name, by, "stopped")
	return nil
}

// Prompt implements control.Backend.
func (o *Operator) Prompt(ctx context.Context, by control.Peer, p control.PromptParams) error {
	meta := map[string]any{"source": "operator", "user": by.User}
	if err := o.g.sv.Prompt(ctx, p.Name, p.Text, meta); err != nil {
		return agentError(p.Name, err)
	}
	o.acted("operator_prompt", p.Name, by, fmt.Sprintf("prompt of %d bytes", len(p.Text)))
	return nil
}

// Approvals implements control.Backend (storeView.approvals).
func (o *Operator) Approvals(ctx context.Context, p control.ApprovalsParams) ([]control.Approval, error) {
	return o.view().approvals(ctx, p)
}

// Approval implements control.Backend.
func (o *Operator) Approval(ctx context.Context, id string) (control.Approval, error) {
	a, err := o.g.Approval(ctx, id)
	if err != nil {
		return control.Approval{}, decisionError(id, a, err)
	}
	return approvalView(a), nil
}

// Approve implements control.Backend.
func (o *Operator) Approve(ctx context.Context, by control.Peer, p control.ApproveParams) (control.Approval, error) {
	a, err := o.g.Approve(ctx, p.ID, p.SHA256, decider(by), p.Note)
	if errors.Is(err, store.ErrAlreadyApproved) && a != nil {
		return control.Approval{}, alreadyApproved(a, decider(by))
	}
	if err != nil {
		return control.Approval{}, decisionError(p.ID, a, err)
	}
	return approvalView(a), nil
}

// Reject implements control.Backend.
func (o *Operator) Reject(ctx context.Context, by control.Peer, p control.RejectParams) (control.Approval, error) {
	a, err := o.g.Reject(ctx, p.ID, p.SHA256, decider(by), p.Reason)
	if err != nil {
		return control.Approval{}, decisionError(p.ID, a, err)
	}
	return approvalView(a), nil
}

// alreadyApproved is the refusal of a second approval by the same
// operator (uid) of an item that needs several: "approval item ap-x
// already has your approval (alice, uid 1000, at ...): 1 of 2 approvals;
// the next must come from another operator (another uid); nothing was
// changed".
func alreadyApproved(a *store.Approval, by store.Decider) error {
	when := ""
	for _, g := range a.Grants {
		if g.By.UID == by.UID {
			when = ", at " + g.At.Format("2006-01-02 15:04:05Z07:00")
		}
	}
	return control.Errorf(control.CodeAlreadyApproved, "approval item %s already has your approval (%s, uid %d%s): %s; "+
		"the next must come from another operator (another uid); nothing was changed", a.ID, by.Name, by.UID, when, a.Progress())
}

// decisionError maps the errors of a decision to the API's codes, with a
// message that says what happened to the item.
func decisionError(id string, a *store.Approval, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return control.Errorf(control.CodeNotFound, "no approval item %q (see bcpgw approvals list)", id)
	case errors.Is(err, store.ErrDecided):
		if a != nil {
			return control.Errorf(control.CodeAlreadyDecided, "approval item %s was already %s by %s at %s; nothing was changed",
				id, a.Status, a.DecidedBy.Name, a.DecidedAt.Format("2006-01-02 15:04:05Z07:00"))
		}
		return control.Errorf(control.CodeAlreadyDecided, "approval item %s was already decided; nothing was changed", id)
	case errors.Is(err, store.ErrAlreadyApproved):
		return control.Errorf(control.CodeAlreadyApproved, "%v: the next approval must come from another operator (another uid); nothing was changed", err)
	case errors.Is(err, store.ErrHashMismatch):
		return control.Errorf(control.CodeHashMismatch, "approval item %s: the content you were shown is not the content stored; look at it again", id)
	case errors.Is(err, store.ErrExpired):
		return control.Errorf(control.CodeExpired, "approval item %s expired before the decision; the Reader was told", id)
	case errors.Is(err, ErrRevoked):
		return control.Errorf(control.CodeRevoked, "%v; the item was dropped", err)
	case errors.Is(err, ErrNotRunning):
		return control.Errorf(control.CodeNotRunning, "the gateway is still starting; try again in a moment")
	}
	return err
}

func approvalView(a *store.Approval) control.Approval {
	v := control.Approval{
		Seq: a.Seq, ID: a.ID, Status: string(a.Status), Controller: a.Controller, Reader: a.Reader, SubscriptionID: a.SubscriptionID,
		QueryID: a.QueryID, Category: int(a.Category), Directive: a.Directive, Response: a.Response, SHA256: a.SHA256,
		Anomalies: a.Anomalies, BandwidthBits: a.Bits, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
		DecidedAt: a.DecidedAt, DecidedBy: a.DecidedBy.Name, DecidedPID: a.DecidedBy.PID,
		Reason: a.Reason, Note: a.Note, Required: a.Required,
	}
	if a.Kind == store.KindSubscription {
		v.Kind, v.RequestID = string(a.Kind), a.RequestID
	}
	if v.Anomalies == nil {
		v.Anomalies = []bcp.Anomaly{}
	}
	if a.DecidedBy.PID > 0 {
		uid := a.DecidedBy.UID
		v.DecidedUID = &uid
	}
	for _, g := range a.Grants {
		v.Approvals = append(v.Approvals, control.Approver{User: g.By.Name, UID: g.By.UID, PID: g.By.PID, At: g.At, Note: g.Note})
	}
	return v
}

// Events implements control.Backend (storeView.events).
func (o *Operator) Events(ctx context.Context, p control.EventsParams) ([]control.Event, error) {
	return o.view().events(ctx, p)
}

// LastEventSeq implements control.Backend.
func (o *Operator) LastEventSeq(ctx context.Context) (int64, error) {
	return o.g.cfg.Store.LastEventSeq(ctx)
}

// EventsPrunedBefore implements control.Backend.
func (o *Operator) EventsPrunedBefore(ctx context.Context) (int64, error) {
	return o.g.cfg.Store.EventsPrunedBefore(ctx)
}

// FlushEvents implements control.Backend: audit events ride on the next
// commit somebody waits for (store.Flush).
func (o *Operator) FlushEvents(ctx context.Context) error { return o.g.cfg.Store.Flush(ctx) }

// EventsChanged implements control.Backend.
func (o *Operator) EventsChanged() <-chan struct{} { return o.g.cfg.Store.EventsChanged() }

// Reload implements control.Backend.
func (o *Operator) Reload(ctx context.Context, by control.Peer) (control.ReloadResult, error) {
	r, err := o.g.Reload(ctx, decider(by).String())
	var de *DefinitionsError
	if errors.As(err, &de) {
		return control.ReloadResult{}, control.Errorf(control.CodeInvalidDefs, "%v", err)
	}
	if err != nil {
		return control.ReloadResult{}, err
	}
	return control.ReloadResult{Changed: r.Changed(), Agents: r.Agents, Summary: r.Summary()}, nil
}

// Refused implements control.Backend.
func (o *Operator) Refused(p control.Peer, why string) {
	o.g.event(store.Event{Time: o.g.now(), Kind: "control_refused", Code: "permission_denied",
		Detail: fmt.Sprintf("uid %d, pid %d: %s", p.UID, p.PID, why)})
}

// Report implements control.Backend (storeView.report): the sessions of
// the Controllers of the definitions in force, and of any agent that was
// sent something.
func (o *Operator) Report(ctx context.Context, p control.ReportParams) (control.Report, error) {
	set := o.g.set.Load()
	if p.Agent != "" && set.Agent(p.Agent) == nil {
		return control.Report{}, control.Errorf(control.CodeNotFound, "no agent named %q (see bcpgw agents)", p.Agent)
	}
	controllers := map[string]bool{}
	for _, l := range set.Links {
		controllers[l.Controller.Name] = true
	}
	return o.view().report(ctx, p.Agent, func(agent string) bool { return controllers[agent] })
}
