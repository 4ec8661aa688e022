package gateway

import (
	"sync"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// DefaultMaxBacklog is the default Config.MaxBacklog.
const DefaultMaxBacklog = 1000

// backlog counts the pending deliveries of each (Controller, Reader)
// pair, so that a Reader can be refused before it buries its Controller:
// past the limit a push is refused with backlog_full, charges nothing,
// and may be sent again once the Controller has caught up. Only pushes
// are refused: an answer was asked for by the Controller, and an approved
// item by an operator, so those are counted but always admitted.
//
// The counts start from the store (load) and follow every delivery from
// its admission to its end (delivered, dropped or parked). Pairs with
// nothing pending have no entry, so the map is as large as the set of
// pairs with a backlog, whatever names a hostile runtime sends.
type backlog struct {
	limit int

	mu sync.Mutex
	n  map[store.Pair]int
}

func newBacklog(limit int) *backlog {
	if limit <= 0 {
		limit = DefaultMaxBacklog
	}
	return &backlog{limit: limit, n: map[store.Pair]int{}}
}

// load sets the counts to those of the store at start.
func (b *backlog) load(counts map[store.Pair]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for p, n := range counts {
		b.n[p] += n
	}
}

// reserve counts one more pending push for p, or reports false, counting
// nothing, if p's backlog is full. A reservation that does not become a
// delivery is given back with release.
func (b *backlog) reserve(p store.Pair) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n[p] >= b.limit {
		return false
	}
	b.n[p]++
	return true
}

// add counts one more pending delivery for p, whatever the backlog.
func (b *backlog) add(p store.Pair) {
	b.mu.Lock()
	b.n[p]++
	b.mu.Unlock()
}

// release gives back a reservation (or an add) for p.
func (b *backlog) release(p store.Pair) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch n := b.n[p]; {
	case n > 1:
		b.n[p] = n - 1
	default:
		delete(b.n, p)
	}
}

// done counts the end of a pending delivery: a batch's, of its pushes.
func (b *backlog) done(d store.Delivery) {
	for range d.Weight() {
		b.release(store.Pair{Controller: d.Controller, Reader: d.Reader})
	}
}

// pending returns p's count.
func (b *backlog) pending(p store.Pair) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n[p]
}
