package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/internal/clock"
)

// A turn on its way to an agent's runtime: the one way the outbox
// (deliveries), queries and cron bring work to a session. Each passes
// its own policy for what to do around an attempt and after a failed one.

// turnJob is one turn to bring to an agent's session.
type turnJob struct {
	agent string
	// msg makes the turn for the session it goes to: a TriOnyx
	// Controller reads deliveries in its own dialect (forController).
	msg func(s *session.Session) any
	// last, if set, is the session of the sender's last turn, asked
	// first: the supervisor is asked only when there is none or it has
	// ended. bringTurn returns the session the turn went to, for the
	// sender's next turn.
	last *session.Session
	// check, if set, is asked before a session is started for the turn
	// and again right before the turn is queued (a reload may come while
	// the session starts): an error ends the attempt, and is given to
	// retry. The outbox checks that the delivery is not revoked.
	check func() error
	// sent, if set, is told once the runtime has been handed the turn,
	// which may have waited behind others (a prompt, a cron firing).
	sent func()
	// await, if set, waits for the turn's result once it is sent; the
	// default waits for it or for ctx.
	await func(ctx context.Context, done <-chan error) error
	// retry says, after the attempt-th (from 0) failed with err, how long
	// to wait before the next, or that there is none. sent tells whether
	// the runtime had been handed the turn: a session that ended after it
	// may have been killed by it. Nil: the first failure ends the job.
	retry func(attempt int, sent bool, err error) (wait time.Duration, again bool)
}

// bringTurn brings j's turn to its agent and waits for its result,
// trying again as j.retry says. It returns nil once the runtime has
// answered the turn with result, or the last attempt's error (ctx's, if
// ctx ended); and the session of the last attempt, if it got one.
func (g *Gateway) bringTurn(ctx context.Context, j turnJob) (*session.Session, error) {
	for attempt := 0; ; attempt++ {
		sess, sent, err := g.tryTurn(ctx, j)
		if sess != nil {
			j.last = sess
		}
		switch {
		case err == nil:
			return j.last, nil
		case ctx.Err() != nil:
			return j.last, ctx.Err()
		case j.retry == nil:
			return j.last, err
		}
		wait, again := j.retry(attempt, sent, err)
		if !again {
			return j.last, err
		}
		if wait > 0 && !g.sleep(ctx, wait) {
			return j.last, ctx.Err()
		}
	}
}

// tryTurn is one attempt of j: get the session, queue the turn, wait
// until the runtime is handed it, then for its result. It returns the
// session it used (nil if it got none), and whether the runtime was
// handed the turn.
func (g *Gateway) tryTurn(ctx context.Context, j turnJob) (sess *session.Session, sent bool, err error) {
	sess = j.last
	if sess == nil || sess.Ended() {
		if err := check(j); err != nil {
			return nil, false, err // no session is started for it
		}
		if sess, err = g.sv.Ensure(ctx, j.agent); err != nil {
			return nil, false, err
		}
	}
	if err := check(j); err != nil {
		return sess, false, err
	}
	sentCh, done, err := sess.TurnSent(ctx, j.msg(sess))
	if err != nil {
		return sess, false, err
	}
	// The turn may wait behind another: it counts as sent, and its
	// session's end as its failure, only once the runtime was given it.
	select {
	case <-sentCh:
	case err := <-done:
		select {
		case <-sentCh: // sent, and answered or ended at once
			done = replay(err)
		default:
			if errors.Is(err, session.ErrSessionClosed) {
				// The session is ending: it answers the turns queued
				// behind others just before it counts as ended. Wait for
				// that, so that the next attempt asks for a new session
				// instead of spending itself on this one.
				select {
				case <-sess.Done():
				case <-ctx.Done():
				}
			}
			return sess, false, err
		}
	case <-ctx.Done():
		return sess, false, ctx.Err()
	}
	if j.sent != nil {
		j.sent()
	}
	if j.await != nil {
		return sess, true, j.await(ctx, done)
	}
	select {
	case err := <-done:
		return sess, true, err
	case <-ctx.Done():
		return sess, true, ctx.Err()
	}
}

func check(j turnJob) error {
	if j.check == nil {
		return nil
	}
	return j.check()
}

// replay returns a channel that holds err: a turn's outcome read early.
func replay(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}

// sleep waits d on the gateway's clock, or until ctx ends (false).
func (g *Gateway) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, g.cfg.Clock, d)
}
