package control

import (
	"context"
	"fmt"
)

// Typed wrappers of Call, one per method.

// Status returns the gateway's status.
func (cl *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := cl.Call(ctx, MethodStatus, nil, &st)
	return st, err
}

// Agents lists the agents.
func (cl *Client) Agents(ctx context.Context) ([]Agent, error) {
	var all []Agent
	err := cl.Call(ctx, MethodAgentsList, nil, &all)
	return all, err
}

// StartAgent starts an agent's session (and clears a failed state).
func (cl *Client) StartAgent(ctx context.Context, name string) error {
	return cl.Call(ctx, MethodAgentsStart, AgentParams{Name: name}, nil)
}

// StopAgent stops an agent's session.
func (cl *Client) StopAgent(ctx context.Context, name string) error {
	return cl.Call(ctx, MethodAgentsStop, AgentParams{Name: name}, nil)
}

// Prompt sends a prompt to an agent, starting its session if needed.
func (cl *Client) Prompt(ctx context.Context, name, text string) error {
	return cl.Call(ctx, MethodAgentsPrompt, PromptParams{Name: name, Text: text}, nil)
}

// ApprovalsPage returns one page of approval items (see ApprovalsParams).
func (cl *Client) ApprovalsPage(ctx context.Context, p ApprovalsParams) (ApprovalsPage, error) {
	var page ApprovalsPage
	err := cl.Call(ctx, MethodApprovalsList, p, &page)
	return page, err
}

// Approvals lists every approval item of a status (pending ones when
// status is empty, every one when it is "all"), reading them a page of
// MaxApprovalsPage at a time: no answer is large, but the list is as
// long as the queue. Use ApprovalsPage to hold less.
func (cl *Client) Approvals(ctx context.Context, status string) ([]Approval, error) {
	all := []Approval{}
	p := ApprovalsParams{Status: status, Limit: MaxApprovalsPage}
	for {
		page, err := cl.ApprovalsPage(ctx, p)
		if err != nil {
			return all, err
		}
		all = append(all, page.Items...)
		if page.Next == 0 {
			return all, nil
		}
		if page.Next <= p.Cursor {
			return all, fmt.Errorf("%s: the gateway's next cursor %d does not follow %d", MethodApprovalsList, page.Next, p.Cursor)
		}
		p.Cursor = page.Next
	}
}

// Approval returns one approval item.
func (cl *Client) Approval(ctx context.Context, id string) (Approval, error) {
	var a Approval
	err := cl.Call(ctx, MethodApprovalsGet, IDParams{ID: id}, &a)
	return a, err
}

// Approve approves an item; sha256 is the hash of the content shown.
func (cl *Client) Approve(ctx context.Context, id, sha256, note string) (Approval, error) {
	var a Approval
	err := cl.Call(ctx, MethodApprovalsApprove, ApproveParams{ID: id, SHA256: sha256, Note: note}, &a)
	return a, err
}

// Reject rejects an item with a reason; sha256 may be empty.
func (cl *Client) Reject(ctx context.Context, id, sha256, reason string) (Approval, error) {
	var a Approval
	err := cl.Call(ctx, MethodApprovalsReject, RejectParams{ID: id, SHA256: sha256, Reason: reason}, &a)
	return a, err
}

// Events returns a page of events.
func (cl *Client) Events(ctx context.Context, p EventsParams) (EventsPage, error) {
	var page EventsPage
	err := cl.Call(ctx, MethodEventsList, p, &page)
	return page, err
}

// Subscribe asks for events as notifications (see SubscribeParams).
func (cl *Client) Subscribe(ctx context.Context, p SubscribeParams) (SubscribeResult, error) {
	var r SubscribeResult
	err := cl.Call(ctx, MethodSubscribe, p, &r)
	return r, err
}

// Unsubscribe ends a subscription.
func (cl *Client) Unsubscribe(ctx context.Context, id string) error {
	return cl.Call(ctx, MethodUnsubscribe, UnsubscribeParams{Subscription: id}, nil)
}

// Reload asks the gateway to reload its definitions.
func (cl *Client) Reload(ctx context.Context) (ReloadResult, error) {
	var r ReloadResult
	err := cl.Call(ctx, MethodReload, nil, &r)
	return r, err
}

// Report returns the exposure report.
func (cl *Client) Report(ctx context.Context, p ReportParams) (Report, error) {
	var r Report
	err := cl.Call(ctx, MethodReport, p, &r)
	return r, err
}
