package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Handler is what a runtime author supplies. Every field is optional.
// Prompt, Query and Delivery are turns: they run one at a time, in the
// order the gateway sent them, and the SDK answers each with a result
// message when it returns (is_error when it returns an error). The
// context of a turn is cancelled by an interrupt or a shutdown.
type Handler struct {
	// Start runs when the start message arrives, before ready is sent.
	Start func(ctx context.Context, c *Client) error
	// Subscriptions runs when the gateway announces the subscriptions a
	// Reader may publish to, each with its rate limit if it has one
	// (ActiveSubscription.RateLimit). Its context lasts as long as the
	// session, so it may start a publisher that outlives the call.
	Subscriptions func(ctx context.Context, c *Client, subs []ActiveSubscription)
	// Prompt handles a trigger (cron, operator).
	Prompt func(ctx context.Context, c *Client, p Prompt) error
	// Query handles a Controller's query to this Reader; answer it with
	// c.Respond.
	Query func(ctx context.Context, c *Client, q Query) error
	// Delivery handles validated data arriving at a Controller. A delivery
	// whose delivery_id was already seen is acknowledged without calling
	// Delivery again.
	Delivery func(ctx context.Context, c *Client, d ResponseDelivery) error
	// QueryFailed, if set, receives a bcp_query_error that arrives after
	// the query was sent (query_timeout; an answer an operator rejected).
	// It runs on the SDK's reading goroutine and must not block.
	QueryFailed func(c *Client, e QueryError)
	// SubscribeResult, if set, receives the bcp_subscribe_results that
	// arrive after Subscribe returned: an operator's approval or
	// rejection, an expiry, a revocation. It runs on the SDK's reading
	// goroutine and must not block.
	SubscribeResult func(c *Client, r SubscribeResult)
	// Applied, if set, reports whether a delivery id was already applied
	// by an earlier process of this runtime. The SDK remembers the ids of
	// its own process; a runtime that keeps state across restarts (the
	// gateway redelivers after a crash of either side) records the ids it
	// applied with that state and answers here, so each delivery is
	// applied exactly once.
	Applied func(deliveryID string) bool
}

// ErrClosed is returned by Client calls made after the session ended.
var ErrClosed = errors.New("runtime session closed")

// QueryRefused is the error Client.Query returns when the gateway refuses
// the query. Reason starts with an error code.
type QueryRefused struct{ Reason string }

func (e *QueryRefused) Error() string { return "query refused: " + e.Reason }

// Client is the runtime's side of one session: what handlers use to talk
// to the gateway. Its methods are safe for concurrent use.
type Client struct {
	enc   *Encoder
	agent StartAgent

	mu       sync.Mutex
	report   TurnReport // of the running turn; reset when a turn starts
	subs     []ActiveSubscription
	waiting  map[string][]chan ValidationResult // by "q:" or "s:" + id, FIFO
	requests map[string]chan any                // by request_id
	closed   bool
}

// Agent returns the agent described by the start message.
func (c *Client) Agent() StartAgent { return c.agent }

// Subscriptions returns the subscriptions last announced to this Reader.
func (c *Client) Subscriptions() []ActiveSubscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ActiveSubscription(nil), c.subs...)
}

// Publish sends response (any JSON-encodable value, or json.RawMessage)
// to a subscription and waits for the gateway's verdict. A Cat-3 verdict
// comes only after a person decided, so pass a context with a deadline if
// the turn must not wait that long.
func (c *Client) Publish(ctx context.Context, subscriptionID, controller string, response any) (ValidationResult, error) {
	p, err := c.SendPublish(subscriptionID, controller, response)
	if err != nil {
		return ValidationResult{}, err
	}
	return p.Wait(ctx)
}

// Respond answers a query and waits for the gateway's verdict.
func (c *Client) Respond(ctx context.Context, queryID string, response any) (ValidationResult, error) {
	p, err := c.SendRespond(queryID, response)
	if err != nil {
		return ValidationResult{}, err
	}
	return p.Wait(ctx)
}

// SendPublish writes a publish and returns at once: when it returns the
// message is on the wire, ahead of anything written after it (the turn's
// result, say), and its verdict is still to come. Publish is SendPublish
// then Wait.
func (c *Client) SendPublish(subscriptionID, controller string, response any) (*Pending, error) {
	raw, err := toRaw(response)
	if err != nil {
		return nil, err
	}
	return c.send("s:"+subscriptionID, Response{Type: TypeResponse, SubscriptionID: subscriptionID, Controller: controller, Response: raw})
}

// SendRespond writes an answer to a query and returns at once, like
// SendPublish.
func (c *Client) SendRespond(queryID string, response any) (*Pending, error) {
	raw, err := toRaw(response)
	if err != nil {
		return nil, err
	}
	return c.send("q:"+queryID, Response{Type: TypeResponse, QueryID: queryID, Response: raw})
}

// Pending is a publish or an answer written to the gateway whose verdict
// has not been read yet.
type Pending struct {
	ch chan ValidationResult
}

// Wait waits for the verdict, until ctx ends.
func (p *Pending) Wait(ctx context.Context) (ValidationResult, error) {
	select {
	case r, ok := <-p.ch:
		if !ok {
			return ValidationResult{}, ErrClosed
		}
		return r, nil
	case <-ctx.Done():
		return ValidationResult{}, ctx.Err()
	}
}

func toRaw(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return raw, nil
}

// await sends msg and waits for the validation result filed under key.
// Registering and sending happen under one lock, so waiters queue in the
// order their messages were written, which is the order results return.
func (c *Client) send(key string, msg any) (*Pending, error) {
	ch := make(chan ValidationResult, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	c.waiting[key] = append(c.waiting[key], ch)
	if err := c.enc.Encode(msg); err != nil {
		// Not sent: no verdict will come for it.
		if w := c.waiting[key][:len(c.waiting[key])-1]; len(w) > 0 {
			c.waiting[key] = w
		} else {
			delete(c.waiting, key)
		}
		return nil, err
	}
	return &Pending{ch: ch}, nil
}

// Query sends a query to a Reader. It returns once the gateway has
// accepted (QuerySent) or refused (*QueryRefused) it; the answer arrives
// later as a Delivery turn.
func (c *Client) Query(ctx context.Context, q QueryRequest) (QuerySent, error) {
	q.Type = TypeQueryRequest
	if q.RequestID == "" {
		return QuerySent{}, errors.New("query needs a request_id")
	}
	ch := make(chan any, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return QuerySent{}, ErrClosed
	}
	c.requests[q.RequestID] = ch
	err := c.enc.Encode(q)
	c.mu.Unlock()
	if err != nil {
		return QuerySent{}, err
	}
	select {
	case v, ok := <-ch:
		if !ok {
			return QuerySent{}, ErrClosed
		}
		if m, refused := v.(QueryError); refused {
			return QuerySent{}, &QueryRefused{Reason: m.Reason}
		}
		return v.(QuerySent), nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.requests, q.RequestID)
		c.mu.Unlock()
		return QuerySent{}, ctx.Err()
	}
}

// SubscribeRefused is the error Client.Subscribe returns when the gateway
// refuses the request at once. Reason starts with an error code.
type SubscribeRefused struct{ Reason string }

func (e *SubscribeRefused) Error() string { return "subscription request refused: " + e.Reason }

// Subscribe asks for a new subscription at run time (BCPSubscribe). It
// returns the first answer: pending (the request waits for an operator;
// the result has the subscription's id) or a refusal (*SubscribeRefused).
// The decision arrives later through Handler.SubscribeResult.
func (c *Client) Subscribe(ctx context.Context, r SubscribeRequest) (SubscribeResult, error) {
	r.Type = TypeSubscribeRequest
	if r.RequestID == "" {
		return SubscribeResult{}, errors.New("subscribe needs a request_id")
	}
	key := subscribeKey(r.RequestID)
	ch := make(chan any, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return SubscribeResult{}, ErrClosed
	}
	c.requests[key] = ch
	err := c.enc.Encode(r)
	c.mu.Unlock()
	if err != nil {
		return SubscribeResult{}, err
	}
	select {
	case v, ok := <-ch:
		if !ok {
			return SubscribeResult{}, ErrClosed
		}
		res := v.(SubscribeResult)
		if res.Status == SubscribeRejected {
			return res, &SubscribeRefused{Reason: res.Reason}
		}
		return res, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.requests, key)
		c.mu.Unlock()
		return SubscribeResult{}, ctx.Err()
	}
}

// subscribeKey keeps subscription requests apart from queries in
// Client.requests: a Controller may use one request_id for both.
func subscribeKey(requestID string) string { return "subscribe:" + requestID }

// Log sends a structured log line to the gateway's audit log.
func (c *Client) Log(level, message string) error {
	return c.enc.Encode(Log{Type: TypeLog, Level: level, Message: message})
}

// Error reports a problem to the gateway (an error message: audited and
// logged, it changes nothing else). A runtime uses it to say why a turn
// failed, for example that its model provider refused the API key.
func (c *Client) Error(message string) error {
	return c.enc.Encode(Error{Type: TypeError, Message: message})
}

// Text records something the runtime's model said (audit only).
func (c *Client) Text(content string) error {
	return c.enc.Encode(Text{Type: TypeText, Content: content})
}

// ToolUse records a tool call of the runtime's model (audit only). input
// must be valid JSON or nil.
func (c *Client) ToolUse(id, name string, input json.RawMessage) error {
	return c.enc.Encode(ToolUse{Type: TypeToolUse, ID: id, Name: name, Input: input})
}

// ToolResult records what a tool call returned to the model (audit only).
func (c *Client) ToolResult(id, name, content string, isError bool) error {
	return c.enc.Encode(ToolResult{Type: TypeToolResult, ID: id, Name: name, Content: content, IsError: isError})
}

// TurnReport is what a turn handler may say about the turn it is running;
// the SDK puts it into the turn's result message.
type TurnReport struct {
	// NumTurns is how many model round trips the turn took; 0 reports 1.
	NumTurns int
	// CostUSD is what the turn cost, when the runtime can know it.
	CostUSD float64
	// Usage is the tokens the turn consumed, or nil when unknown.
	Usage *Usage
}

// Report sets what the result of the running turn will say; call it from
// a turn handler (Prompt, Query, Delivery). A later call replaces an
// earlier one, and every turn starts with an empty report.
func (c *Client) Report(r TurnReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report = r
}

// takeReport returns the running turn's report and clears it.
func (c *Client) takeReport() TurnReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.report
	c.report = TurnReport{}
	return r
}

// resolve hands a validation result to the oldest waiter for its id.
func (c *Client) resolve(r ValidationResult) bool {
	key := "s:" + r.SubscriptionID
	if r.QueryID != "" {
		key = "q:" + r.QueryID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.waiting[key]
	if len(q) == 0 {
		return false
	}
	q[0] <- r
	if len(q) == 1 {
		delete(c.waiting, key)
	} else {
		c.waiting[key] = q[1:]
	}
	return true
}

func (c *Client) answer(requestID string, v any) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.requests[requestID]
	if ok {
		ch <- v
		delete(c.requests, requestID)
	}
	return ok
}

// close fails every waiter.
func (c *Client) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, q := range c.waiting {
		for _, ch := range q {
			close(ch)
		}
	}
	for _, ch := range c.requests {
		close(ch)
	}
	c.waiting, c.requests = nil, nil
}

// maxSeenDeliveries bounds the memory of seen delivery ids; redeliveries
// come soon after the original, so the most recent ids are the ones that
// matter.
const maxSeenDeliveries = 10000

// Run speaks the protocol on in and out until the gateway sends shutdown,
// closes in, or ctx ends. It reads start, calls h.Start, sends ready, then
// runs turns one at a time. Nothing but protocol messages is written to
// out. It returns nil on a clean end.
func Run(ctx context.Context, in io.Reader, out io.Writer, h Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dec := NewDecoder(in, DefaultMaxLine)
	c := &Client{enc: NewEncoder(out), waiting: map[string][]chan ValidationResult{}, requests: map[string]chan any{}}
	defer c.close()

	first, err := dec.Next()
	if err != nil {
		return fmt.Errorf("read start: %w", err)
	}
	if first.Type != TypeStart {
		return fmt.Errorf("first message is %q, want start", first.Type)
	}
	var start Start
	if err := first.Decode(&start); err != nil {
		return err
	}
	c.agent = start.Agent
	if h.Start != nil {
		if err := h.Start(ctx, c); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	if err := c.enc.Encode(Ready{Type: TypeReady}); err != nil {
		return err
	}

	// The reader goroutine owns dec; Run owns the turn loop. Turns arrive
	// one at a time from the gateway, so the queue rarely holds more than
	// one; it is generous so that a waiting Publish never blocks the reader.
	type turn struct {
		env Envelope
		seq int // 1, 2, ... for turns; 0 for announcements
	}
	turns := make(chan turn, 256)
	// An interrupt applies to every turn queued before it, including one
	// the loop below has not picked up yet; seq numbers make that exact.
	var (
		imu         sync.Mutex
		queued      int                // turns queued so far
		interrupted int                // turns up to this seq are interrupted
		cancelTurn  context.CancelFunc // the running turn's, or nil
		readErr     error
		wg          sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(turns)
		for {
			env, err := dec.Next()
			var le *LineError
			switch {
			case errors.As(err, &le):
				continue
			case errors.Is(err, io.EOF):
				return
			case err != nil:
				readErr = err
				return
			}
			switch env.Type {
			case TypeValidationResult:
				var r ValidationResult
				if env.Decode(&r) == nil {
					c.resolve(r)
				}
			case TypeQuerySent:
				var m QuerySent
				if env.Decode(&m) == nil {
					c.answer(m.RequestID, m)
				}
			case TypeQueryError:
				var m QueryError
				if env.Decode(&m) == nil && !c.answer(m.RequestID, m) && h.QueryFailed != nil {
					h.QueryFailed(c, m)
				}
			case TypeSubscribeResult:
				var m SubscribeResult
				if env.Decode(&m) == nil && !c.answer(subscribeKey(m.RequestID), m) && h.SubscribeResult != nil {
					h.SubscribeResult(c, m)
				}
			case TypeInterrupt:
				imu.Lock()
				interrupted = queued
				if cancelTurn != nil {
					cancelTurn()
				}
				imu.Unlock()
			case TypeShutdown:
				cancel()
				return
			case TypePrompt, TypeQuery, TypeResponseDelivery, TypeSubscriptionsActive:
				t := turn{env: env}
				if env.Type != TypeSubscriptionsActive {
					imu.Lock()
					queued++
					t.seq = queued
					imu.Unlock()
				}
				select {
				case turns <- t:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	defer wg.Wait()

	seen := newSeenSet(maxSeenDeliveries)
	for {
		var t turn
		var ok bool
		select {
		case t, ok = <-turns:
		case <-ctx.Done():
		}
		if !ok {
			cancel()
			wg.Wait()
			return readErr
		}
		if t.env.Type == TypeSubscriptionsActive {
			// Not a turn: the handler may start work that lives as long
			// as the session, so it gets the session's context.
			runTurn(ctx, c, h, t.env, seen)
			continue
		}
		turnCtx, turnCancel := context.WithCancel(ctx)
		imu.Lock()
		cancelTurn = turnCancel
		if t.seq <= interrupted {
			turnCancel() // interrupted before it started
		}
		imu.Unlock()
		began := time.Now()
		c.takeReport() // a report belongs to the turn that makes it
		isTurn, err := runTurn(turnCtx, c, h, t.env, seen)
		imu.Lock()
		cancelTurn = nil
		imu.Unlock()
		turnCancel()
		if !isTurn {
			continue
		}
		rep := c.takeReport()
		res := Result{Type: TypeResult, DurationMS: time.Since(began).Milliseconds(), NumTurns: max(rep.NumTurns, 1), CostUSD: rep.CostUSD, Usage: rep.Usage, IsError: err != nil}
		if err := c.enc.Encode(res); err != nil {
			return err
		}
	}
}

// runTurn dispatches one queued message. isTurn is false for messages that
// are not answered with a result.
func runTurn(ctx context.Context, c *Client, h Handler, env Envelope, seen *seenSet) (isTurn bool, err error) {
	switch env.Type {
	case TypeSubscriptionsActive:
		var m SubscriptionsActive
		if err := env.Decode(&m); err != nil {
			return false, nil
		}
		c.mu.Lock()
		c.subs = m.Subscriptions
		c.mu.Unlock()
		if h.Subscriptions != nil {
			h.Subscriptions(ctx, c, m.Subscriptions)
		}
		return false, nil
	case TypePrompt:
		var m Prompt
		if err := env.Decode(&m); err != nil {
			return true, err
		}
		if h.Prompt == nil {
			return true, nil
		}
		return true, h.Prompt(ctx, c, m)
	case TypeQuery:
		var m Query
		if err := env.Decode(&m); err != nil {
			return true, err
		}
		if h.Query == nil {
			return true, errors.New("this runtime does not answer queries")
		}
		return true, h.Query(ctx, c, m)
	case TypeResponseDelivery:
		var m ResponseDelivery
		if err := env.Decode(&m); err != nil {
			return true, err
		}
		if m.DeliveryID != "" && (!seen.add(m.DeliveryID) || (h.Applied != nil && h.Applied(m.DeliveryID))) {
			return true, nil // a redelivery of one already handled
		}
		if h.Delivery == nil {
			return true, nil
		}
		return true, h.Delivery(ctx, c, m)
	}
	return false, nil
}

// seenSet remembers the most recent n ids.
type seenSet struct {
	ids   map[string]bool
	order []string
	max   int
}

func newSeenSet(max int) *seenSet { return &seenSet{ids: map[string]bool{}, max: max} }

// add records id and reports whether it was new.
func (s *seenSet) add(id string) bool {
	if s.ids[id] {
		return false
	}
	s.ids[id] = true
	s.order = append(s.order, id)
	if len(s.order) > s.max {
		delete(s.ids, s.order[0])
		s.order = s.order[1:]
	}
	return true
}
