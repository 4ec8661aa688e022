package clock

import (
	"testing"
	"time"
)

func TestFakeFiresDueTimersOnAdvance(t *testing.T) {
	c := NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	soon, later, stopped := c.NewTimer(time.Second), c.NewTimer(time.Minute), c.NewTimer(time.Second)
	if !c.PendingFor(time.Second) || !c.PendingFor(time.Minute) || c.Pending() != 3 {
		t.Fatalf("pending %d, want the three timers", c.Pending())
	}
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop: want true once, then false")
	}
	c.Advance(time.Second)
	select {
	case at := <-soon.C():
		if !at.Equal(c.Now()) {
			t.Errorf("fired at %v, want %v", at, c.Now())
		}
	default:
		t.Error("the 1s timer did not fire after 1s")
	}
	select {
	case <-later.C():
		t.Error("the 1m timer fired after 1s")
	case <-stopped.C():
		t.Error("a stopped timer fired")
	default:
	}
	if c.Pending() != 1 || !c.PendingFor(59*time.Second) {
		t.Errorf("pending %d, want the 1m timer, 59s away", c.Pending())
	}
}
