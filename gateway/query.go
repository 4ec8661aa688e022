package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// pendingQuery is a query sent to a Reader and not yet answered.
type pendingQuery struct {
	id         string
	requestID  string
	controller string
	csess      *session.Session // the Controller session that asked
	reader     string
	spec       bcp.Spec
	context    string
	bits       float64
	deadline   time.Time
	done       chan struct{} // closed by finishQuery
}

// channelFor returns the channel from controller to reader that a
// request of category cat (a query, a subscription request) may use, or
// why there is none: no_channel, or category_not_allowed beyond the
// channel's max_category.
func channelFor(set *agents.Set, controller, reader string, cat bcp.Category) (*agents.Link, *bcp.Error) {
	link := set.Link(controller, reader)
	switch {
	case link == nil:
		return nil, bcp.Errorf(bcp.NoChannel, "No channel from controller '%s' to reader '%s'", controller, reader)
	case !cat.Valid() || cat > link.MaxCategory():
		return nil, bcp.Errorf(bcp.CategoryNotAllowed, "Category %d is not allowed on the channel to '%s' (max_category %d)", cat, reader, link.MaxCategory())
	}
	return link, nil
}

// maxSpecProblems bounds how many problems of a query spec one refusal
// lists.
const maxSpecProblems = 8

// query handles a Controller's bcp_query_request (PROTOCOL.md section 5,
// Pull): every check, in order, then bcp_query_sent to the Controller and
// bcp_query to the Reader, whose answer is delivered later as a prompt.
// specErr, if set, is why the strict decoding refused the spec: it is
// refused like any invalid spec (validation_failed, naming each key).
func (g *Gateway) query(s *session.Session, line []byte, q runtime.QueryRequest, specErr *runtime.SpecError) {
	controller := s.Name()
	refuse := func(e *bcp.Error) {
		g.refused(controller, q.To, e, line, q.RequestID)
		g.metrics.query("refused", e)
		g.replyQueryError(s, runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.RequestID, ToAgent: q.To, Reason: e.Error()})
	}
	if q.RequestID == "" {
		refuse(bcp.Errorf(bcp.ProtocolError, "bcp_query_request needs a request_id"))
		return
	}
	set := g.set.Load()
	link, e := channelFor(set, controller, q.To, q.Category)
	if e != nil {
		refuse(e)
		return
	}
	var spec bcp.Spec
	var problems []bcp.Problem
	if specErr != nil {
		problems = specErr.Problems
	} else {
		spec, problems = q.Spec.Spec(q.Category)
	}
	if len(problems) > 0 {
		refuse(bcp.Errorf(bcp.ValidationFailed, "Query spec is not valid: %s", problemList(problems)))
		return
	}
	bits := bcp.Bits(spec)
	pq := &pendingQuery{
		id: store.NewID("q-", 12), requestID: q.RequestID, controller: controller, csess: s, reader: q.To,
		spec: spec, context: q.Spec.Context, bits: bits, deadline: g.now().Add(g.cfg.QueryTimeout), done: make(chan struct{}),
	}
	slot, e := g.rates.reserve(link, q.Category, g.now()) // channel rates (ratelimit.go)
	if e != nil {
		refuse(e)
		return
	}
	g.mu.Lock()
	if other := g.pendingRequest(controller, q.RequestID); other != nil {
		g.mu.Unlock()
		slot.release()
		refuse(bcp.Errorf(bcp.ProtocolError, "request_id '%s' is already used by your pending query to '%s'; use a new request_id for each query", q.RequestID, other.reader))
		return
	}
	if e := g.budgets.admitQuery(link, s, q.Category, bits); e != nil {
		g.mu.Unlock()
		slot.release()
		refuse(e)
		return
	}
	g.queries[pq.id] = pq
	g.mu.Unlock()
	g.metrics.query("sent", nil)
	g.metrics.charged(controller, q.To, q.Category, bits)
	g.event(store.Event{Kind: "query_sent", Agent: controller, Peer: q.To, Ref: pq.id, Category: int(q.Category), Bits: bits,
		Detail: fmt.Sprintf("Query %s (request %s) from %s to %s (Cat-%d, %s)", pq.id, q.RequestID, controller, q.To, q.Category, bcp.FormatBits(bits))})
	s.Reply(runtime.QuerySent{Type: runtime.TypeQuerySent, RequestID: q.RequestID, QueryID: queryIDFor(s, pq.id, q.RequestID), ToAgent: q.To, BandwidthBits: bits})
	g.spawn(func() { g.runQuery(g.ctx, pq) })
}

// problemList renders a spec's problems for a refusal, at most
// maxSpecProblems of them.
func problemList(problems []bcp.Problem) string {
	more := ""
	if len(problems) > maxSpecProblems {
		more = fmt.Sprintf("; and %d more", len(problems)-maxSpecProblems)
		problems = problems[:maxSpecProblems]
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.String()
	}
	return strings.Join(msgs, "; ") + more
}

// pendingRequest returns controller's pending query with requestID, or
// nil. Request ids are the Controller's own: they are unique among its
// pending queries (so an answer or an error matches one query), and two
// Controllers may use the same one. g.mu must be held.
func (g *Gateway) pendingRequest(controller, requestID string) *pendingQuery {
	for _, q := range g.queries {
		if q.controller == controller && q.requestID == requestID {
			return q
		}
	}
	return nil
}

// queryIDFor returns the query_id the messages to the Controller session
// s about a query carry: the gateway's id, or, for a runtime in TriOnyx's
// dialect, its own request_id, which is what it matches answers and
// errors with (it ignores bcp_query_sent). Either way only that
// Controller sees its request_id; Readers see the gateway's id.
func queryIDFor(s *session.Session, queryID, requestID string) string {
	if s != nil && s.Def().TriOnyx() && queryID != "" && requestID != "" {
		return requestID
	}
	return queryID
}

// forController adapts a delivery to the dialect of the Controller session
// that receives it: in TriOnyx's, the answer to a query carries the
// Controller's request_id as query_id, and a Cat-3 summary is under
// "response", where TriOnyx's runtime and its gateway put it.
func forController(s *session.Session, msg runtime.ResponseDelivery) runtime.ResponseDelivery {
	if s == nil || !s.Def().TriOnyx() {
		return msg
	}
	msg.QueryID = queryIDFor(s, msg.QueryID, msg.RequestID)
	if msg.Category == bcp.Cat3 {
		var r struct {
			Summary *string `json:"summary"`
		}
		if json.Unmarshal(msg.Response, &r) == nil && r.Summary != nil {
			if b, err := json.Marshal(bcp.Response{{Key: "response", Value: *r.Summary}}); err == nil {
				msg.Response = b
			}
		}
	}
	return msg
}

// runQuery owns one query's life: it brings the query to the Reader
// while it waits for the answer, and at the deadline tells the Controller
// query_timeout.
func (g *Gateway) runQuery(ctx context.Context, q *pendingQuery) {
	timer := g.cfg.Clock.NewTimer(q.deadline.Sub(g.now()))
	defer timer.Stop()
	ctx, cancel := context.WithCancel(ctx)
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		g.dispatchQuery(ctx, q)
	}()
	select {
	case <-timer.C():
		g.timeoutQuery(q)
	case <-q.done:
	case <-ctx.Done():
	}
	cancel()
	<-dispatched
}

// dispatchQuery brings q to the Reader as a turn, starting its session if
// needed, and again to the next session if that one ends before the turn
// does; it retries, with backoff, while the Reader cannot start. It ends
// with the Reader's turn on it (the answer may still come) or with ctx.
func (g *Gateway) dispatchQuery(ctx context.Context, q *pendingQuery) {
	msg := runtime.Query{
		Type: runtime.TypeQuery, QueryID: q.id, Category: q.spec.Category, FromAgent: q.controller, Context: q.context,
		Fields: q.spec.Fields, Questions: q.spec.Questions, Directive: q.spec.Directive, MaxWords: q.spec.MaxWords,
	}
	var lastErr error
	_, _ = g.bringTurn(ctx, turnJob{
		agent: q.reader,
		msg:   func(*session.Session) any { return msg },
		retry: func(attempt int, _ bool, err error) (time.Duration, bool) {
			if lastErr == nil || err.Error() != lastErr.Error() {
				g.log.Warn("query waiting: reader unavailable", "query", q.id, "reader", q.reader, "error", err)
			}
			lastErr = err
			return session.Backoff(attempt), true
		},
	})
}

// finishQuery removes q from the pending queries. It reports false if q
// was no longer pending (answered or timed out).
func (g *Gateway) finishQuery(q *pendingQuery) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queries[q.id] != q {
		return false
	}
	delete(g.queries, q.id)
	close(q.done)
	return true
}

// timeoutQuery tells the Controller that q was not answered in time.
func (g *Gateway) timeoutQuery(q *pendingQuery) {
	if !g.finishQuery(q) {
		return
	}
	e := bcp.Errorf(bcp.QueryTimeout, "Reader '%s' did not answer query %s within %s", q.reader, q.id, g.cfg.QueryTimeout)
	g.event(store.Event{Kind: "query_timeout", Agent: q.controller, Peer: q.reader, Code: string(e.Code), Detail: e.Error(), Ref: q.id})
	g.metrics.query("timed_out", e)
	g.tellController(q, e)
}

// tellController sends a bcp_query_error about q to the Controller session
// that asked, if it is still running; a later session did not ask. It
// never waits on the session.
func (g *Gateway) tellController(q *pendingQuery, e *bcp.Error) {
	msg := runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.requestID, QueryID: queryIDFor(q.csess, q.id, q.requestID),
		ToAgent: q.reader, Reason: e.Error()}
	if q.csess.Def().TriOnyx() {
		g.spawn(func() { g.queryErrorTurn(q.csess, msg) })
		return
	}
	if err := q.csess.Send(g.ctx, msg); err != nil {
		g.log.Info("controller session that asked has ended; query error not sent", "query", q.id, "reason", e.Error())
	}
}

// replyQueryError answers a bcp_query_request that was refused; it runs on
// the Controller session's goroutine (OnMessage).
//
// TriOnyx's runtime takes a bcp_query_error for a prompt: it shows it to
// its model and answers result. A session in its dialect therefore gets
// each bcp_query_error as a turn of its own, after the turn in flight, so
// that its result ends that turn and no other. Other runtimes get it at
// once, in the order of the answers to their lines.
func (g *Gateway) replyQueryError(s *session.Session, msg runtime.QueryError) {
	if s.Def().TriOnyx() {
		g.spawn(func() { g.queryErrorTurn(s, msg) })
		return
	}
	s.Reply(msg)
}

// queryErrorTurn brings a bcp_query_error to s as a turn (TriOnyx's
// dialect) and waits until it is queued.
func (g *Gateway) queryErrorTurn(s *session.Session, msg runtime.QueryError) {
	if _, err := s.Turn(g.ctx, msg); err != nil {
		g.log.Info("controller session has ended; query error not sent", "controller", s.Name(), "request", msg.RequestID, "reason", msg.Reason)
	}
}
