package gateway

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/runtime"
)

// pendingQuery is a query sent to a Reader and not yet answered.
type pendingQuery struct {
	id         string
	requestID  string
	controller string
	csess      *Session // the Controller session that asked
	reader     string
	spec       bcp.Spec
	context    string
	bits       float64
	deadline   time.Time
	done       chan struct{} // closed by finishQuery
}

// query handles a Controller's bcp_query_request (PROTOCOL.md section 5,
// Pull): every check, in order, then bcp_query_sent to the Controller and
// bcp_query to the Reader, whose answer is delivered later as a prompt.
func (g *Gateway) query(s *Session, env runtime.Envelope, q runtime.QueryRequest) {
	controller := s.Name()
	refuse := func(e *bcp.Error) {
		g.refused(controller, q.To, e, env.Raw, q.RequestID)
		g.metrics.query("refused", e)
		s.Reply(runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.RequestID, ToAgent: q.To, Reason: e.Error()})
	}
	set := g.set.Load()
	link := set.Link(controller, q.To)
	spec := bcp.Spec{Category: q.Category, Fields: q.Spec.Fields, Questions: q.Spec.Questions, Directive: q.Spec.Directive, MaxWords: q.Spec.MaxWords}
	switch {
	case q.RequestID == "":
		refuse(bcp.Errorf(bcp.ProtocolError, "bcp_query_request needs a request_id"))
		return
	case link == nil:
		refuse(bcp.Errorf(bcp.NoChannel, "No channel from controller '%s' to reader '%s'", controller, q.To))
		return
	case !q.Category.Valid() || q.Category > link.MaxCategory():
		refuse(bcp.Errorf(bcp.CategoryNotAllowed, "Category %d is not allowed on the channel to '%s' (max_category %d)", q.Category, q.To, link.MaxCategory()))
		return
	}
	if problems := spec.Problems(); len(problems) > 0 {
		msgs := make([]string, 0, len(problems))
		for _, p := range problems {
			msgs = append(msgs, p.String())
		}
		refuse(bcp.Errorf(bcp.ValidationFailed, "Query spec is not valid: %s", strings.Join(msgs, "; ")))
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
	s.Reply(runtime.QuerySent{Type: runtime.TypeQuerySent, RequestID: q.RequestID, QueryID: pq.id, ToAgent: q.To, BandwidthBits: bits})
	g.spawn(func() { g.runQuery(g.ctx, pq) })
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
// does; it retries, with backoff, while the Reader cannot start.
func (g *Gateway) dispatchQuery(ctx context.Context, q *pendingQuery) {
	msg := runtime.Query{
		Type: runtime.TypeQuery, QueryID: q.id, Category: q.spec.Category, FromAgent: q.controller, Context: q.context,
		Fields: q.spec.Fields, Questions: q.spec.Questions, Directive: q.spec.Directive, MaxWords: q.spec.MaxWords,
	}
	var lastErr error
	for attempt := 0; ; attempt++ {
		sess, err := g.sv.Ensure(ctx, q.reader)
		if err == nil {
			var done <-chan error
			if done, err = sess.Turn(ctx, msg); err == nil {
				select {
				case err = <-done:
				case <-ctx.Done():
					return
				}
				if err == nil {
					return // the Reader's turn on it ended; the answer may still come
				}
				// The session ended before the query's turn did: bring it
				// to the next one.
			}
		}
		if ctx.Err() != nil {
			return
		}
		if lastErr == nil || err.Error() != lastErr.Error() {
			g.log.Warn("query waiting: reader unavailable", "query", q.id, "reader", q.reader, "error", err)
		}
		lastErr = err
		if !g.sleep(ctx, Backoff(attempt)) {
			return
		}
	}
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
// that asked, if it is still running; a later session did not ask.
func (g *Gateway) tellController(q *pendingQuery, e *bcp.Error) {
	err := q.csess.Send(g.ctx, runtime.QueryError{Type: runtime.TypeQueryError, RequestID: q.requestID, ToAgent: q.reader, Reason: e.Error()})
	if err != nil {
		g.log.Info("controller session that asked has ended; query error not sent", "query", q.id, "reason", e.Error())
	}
}
