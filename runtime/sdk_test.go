package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// fakeGateway is the gateway's end of an in-process runtime session.
type fakeGateway struct {
	t    *testing.T
	enc  *Encoder
	dec  *Decoder
	in   *io.PipeWriter // runtime stdin
	done chan error     // Run's return value
}

func startRuntime(t *testing.T, h Handler) *fakeGateway {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	g := &fakeGateway{t: t, enc: NewEncoder(stdinW), dec: NewDecoder(stdoutR, 0), in: stdinW, done: make(chan error, 1)}
	go func() {
		err := Run(context.Background(), stdinR, stdoutW, h)
		stdoutW.Close()
		g.done <- err
	}()
	t.Cleanup(func() {
		stdinW.Close()
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after stdin closed")
		}
	})
	g.send(Start{Type: TypeStart, Agent: StartAgent{Name: "researcher", Tools: []string{"BCPPublish"}}})
	g.expect(TypeReady)
	return g
}

func (g *fakeGateway) send(v any) {
	g.t.Helper()
	if err := g.enc.Encode(v); err != nil {
		g.t.Fatalf("send: %v", err)
	}
}

// expect reads the next message, which must have type typ, into v.
func (g *fakeGateway) expect(typ string, v ...any) Envelope {
	g.t.Helper()
	type next struct {
		env Envelope
		err error
	}
	ch := make(chan next, 1)
	go func() { env, err := g.dec.Next(); ch <- next{env, err} }()
	select {
	case n := <-ch:
		if n.err != nil {
			g.t.Fatalf("reading %s: %v", typ, n.err)
		}
		if n.env.Type != typ {
			g.t.Fatalf("got %s (%s), want %s", n.env.Type, n.env.Raw, typ)
		}
		for _, x := range v {
			if err := n.env.Decode(x); err != nil {
				g.t.Fatal(err)
			}
		}
		return n.env
	case <-time.After(10 * time.Second):
		g.t.Fatalf("timed out waiting for %s", typ)
	}
	return Envelope{}
}

func TestRunPublishRoundTrip(t *testing.T) {
	got := make(chan ValidationResult, 1)
	announced := make(chan []ActiveSubscription, 1)
	sessionCtx := make(chan context.Context, 1)
	g := startRuntime(t, Handler{
		Subscriptions: func(ctx context.Context, _ *Client, subs []ActiveSubscription) {
			sessionCtx <- ctx
			announced <- subs
		},
		Prompt: func(ctx context.Context, c *Client, p Prompt) error {
			r, err := c.Publish(ctx, "research-alerts", "main", map[string]any{"has_breaking_news": true})
			got <- r
			return err
		},
	})
	g.send(SubscriptionsActive{Type: TypeSubscriptionsActive, Subscriptions: []ActiveSubscription{{SubscriptionID: "research-alerts", Controller: "main", Category: 1}}})
	if subs := <-announced; len(subs) != 1 || subs[0].SubscriptionID != "research-alerts" {
		t.Fatalf("announced %+v", subs)
	}
	ctx := <-sessionCtx
	g.send(Prompt{Type: TypePrompt, Content: "first"})
	g.expect(TypeResponse)
	g.send(ValidationResult{Type: TypeValidationResult, SubscriptionID: "research-alerts", Success: true})
	<-got
	g.expect(TypeResult)
	if ctx.Err() != nil {
		t.Fatal("the Subscriptions context ended with a turn; it must last as long as the session")
	}
	g.send(Prompt{Type: TypePrompt, Content: "go"})
	var resp Response
	g.expect(TypeResponse, &resp)
	if resp.SubscriptionID != "research-alerts" || resp.Controller != "main" || string(resp.Response) != `{"has_breaking_news":true}` {
		t.Fatalf("published %+v", resp)
	}
	g.send(ValidationResult{Type: TypeValidationResult, SubscriptionID: "research-alerts", Success: true, Detail: "Published"})
	if r := <-got; !r.Success || r.Detail != "Published" {
		t.Errorf("Publish returned %+v", r)
	}
	var res Result
	g.expect(TypeResult, &res)
	if res.IsError || res.NumTurns != 1 {
		t.Errorf("result %+v, want success", res)
	}
}

func TestRunDropsRedeliveries(t *testing.T) {
	var calls atomic.Int32
	g := startRuntime(t, Handler{
		Delivery: func(_ context.Context, _ *Client, d ResponseDelivery) error {
			calls.Add(1)
			return nil
		},
	})
	for _, redelivered := range []bool{false, true} {
		g.send(ResponseDelivery{Type: TypeResponseDelivery, SubscriptionID: "s", DeliveryID: "d-1", Response: json.RawMessage(`{}`), Redelivered: redelivered})
		g.expect(TypeResult) // both are acknowledged, or the gateway would wait forever
	}
	g.send(ResponseDelivery{Type: TypeResponseDelivery, SubscriptionID: "s", DeliveryID: "d-2", Response: json.RawMessage(`{}`)})
	g.expect(TypeResult)
	if n := calls.Load(); n != 2 {
		t.Errorf("Delivery called %d times, want 2 (d-1 once, d-2 once)", n)
	}
}

func TestRunHandlerErrorIsErrorResult(t *testing.T) {
	g := startRuntime(t, Handler{Prompt: func(context.Context, *Client, Prompt) error { return errors.New("model unavailable") }})
	g.send(Prompt{Type: TypePrompt, Content: "go"})
	var res Result
	g.expect(TypeResult, &res)
	if !res.IsError {
		t.Errorf("result %+v, want is_error", res)
	}
}

func TestRunInterruptCancelsTurn(t *testing.T) {
	g := startRuntime(t, Handler{Prompt: func(ctx context.Context, _ *Client, _ Prompt) error {
		<-ctx.Done()
		return ctx.Err()
	}})
	g.send(Prompt{Type: TypePrompt, Content: "long"})
	g.send(Interrupt{Type: TypeInterrupt, Reason: "operator"})
	var res Result
	g.expect(TypeResult, &res)
	if !res.IsError {
		t.Errorf("interrupted turn result %+v, want is_error", res)
	}
}

func TestRunShutdownEndsRun(t *testing.T) {
	g := startRuntime(t, Handler{})
	g.send(Shutdown{Type: TypeShutdown, Reason: "gateway stopping"})
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		g.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after shutdown")
	}
}

func TestRunQueryAndRespond(t *testing.T) {
	sent := make(chan error, 2)
	g := startRuntime(t, Handler{
		Query: func(ctx context.Context, c *Client, q Query) error {
			r, err := c.Respond(ctx, q.QueryID, map[string]string{"summary": "quiet"})
			if err == nil && !r.Success {
				err = errors.New(r.Detail)
			}
			return err
		},
		Prompt: func(ctx context.Context, c *Client, p Prompt) error {
			_, err := c.Query(ctx, QueryRequest{RequestID: p.Content, To: "researcher", Category: 1})
			sent <- err
			return nil
		},
	})
	g.send(Query{Type: TypeQuery, QueryID: "q-1", Category: 3, FromAgent: "main"})
	var resp Response
	g.expect(TypeResponse, &resp)
	if resp.QueryID != "q-1" || resp.SubscriptionID != "" {
		t.Fatalf("response %+v", resp)
	}
	g.send(ValidationResult{Type: TypeValidationResult, QueryID: "q-1", Success: true})
	var res Result
	g.expect(TypeResult, &res)
	if res.IsError {
		t.Errorf("query turn failed")
	}

	// Accepted and refused queries.
	for _, accept := range []bool{true, false} {
		g.send(Prompt{Type: TypePrompt, Content: "r1"})
		var req QueryRequest
		g.expect(TypeQueryRequest, &req)
		if accept {
			g.send(QuerySent{Type: TypeQuerySent, RequestID: req.RequestID, QueryID: "q-2"})
		} else {
			g.send(QueryError{Type: TypeQueryError, RequestID: req.RequestID, Reason: "query_limit: no more"})
		}
		err := <-sent
		var refused *QueryRefused
		if accept && err != nil {
			t.Errorf("accepted query returned %v", err)
		}
		if !accept && (!errors.As(err, &refused) || refused.Reason != "query_limit: no more") {
			t.Errorf("refused query returned %v", err)
		}
		g.expect(TypeResult)
	}
}

func TestRunRefusesMissingStart(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	go func() {
		_ = NewEncoder(stdinW).Encode(Prompt{Type: TypePrompt})
		stdinW.Close()
	}()
	err := Run(context.Background(), stdinR, io.Discard, Handler{})
	if err == nil {
		t.Fatal("Run accepted a session without start")
	}
}

func TestRunResultCarriesTurnReport(t *testing.T) {
	g := startRuntime(t, Handler{Prompt: func(ctx context.Context, c *Client, p Prompt) error {
		if p.Content == "report" {
			c.Report(TurnReport{NumTurns: 3, CostUSD: 0.25, Usage: &Usage{InputTokens: 10, OutputTokens: 4}})
		}
		if err := c.Text("said " + p.Content); err != nil {
			return err
		}
		return c.ToolUse("t1", "BCPPublish", json.RawMessage(`{"a":1}`))
	}})
	g.send(Prompt{Type: TypePrompt, Content: "report"})
	var text Text
	g.expect(TypeText, &text)
	if text.Content != "said report" {
		t.Errorf("text = %+v", text)
	}
	var use ToolUse
	g.expect(TypeToolUse, &use)
	if use.Name != "BCPPublish" || string(use.Input) != `{"a":1}` {
		t.Errorf("tool_use = %+v", use)
	}
	var res Result
	g.expect(TypeResult, &res)
	if res.NumTurns != 3 || res.CostUSD != 0.25 || res.Usage == nil || res.Usage.InputTokens != 10 || res.Usage.OutputTokens != 4 {
		t.Errorf("result = %+v", res)
	}
	// The next turn does not inherit the report.
	g.send(Prompt{Type: TypePrompt, Content: "plain"})
	g.expect(TypeText)
	g.expect(TypeToolUse)
	res = Result{}
	g.expect(TypeResult, &res)
	if res.NumTurns != 1 || res.CostUSD != 0 || res.Usage != nil {
		t.Errorf("second result = %+v", res)
	}
}

// SendPublish returns once the publish is written, before its verdict:
// what the runtime writes next (here the turn's result) comes after it.
func TestSendPublishWritesBeforeTheVerdict(t *testing.T) {
	pending := make(chan *Pending, 1)
	g := startRuntime(t, Handler{
		Prompt: func(ctx context.Context, c *Client, p Prompt) error {
			pd, err := c.SendPublish("research-alerts", "main", map[string]any{"urgent": true})
			pending <- pd
			return err
		},
	})
	g.send(Prompt{Type: TypePrompt, Content: "go"})
	var resp Response
	g.expect(TypeResponse, &resp)
	g.expect(TypeResult) // the turn ended without waiting for the verdict
	if resp.SubscriptionID != "research-alerts" || string(resp.Response) != `{"urgent":true}` {
		t.Fatalf("published %+v", resp)
	}
	pd := <-pending
	g.send(ValidationResult{Type: TypeValidationResult, SubscriptionID: "research-alerts", Success: true, Detail: "Published"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := pd.Wait(ctx); err != nil || !r.Success || r.Detail != "Published" {
		t.Errorf("Wait = %+v, %v", r, err)
	}
}
