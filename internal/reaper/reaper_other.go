//go:build !linux

package reaper

import (
	"context"
	"errors"
)

// New fails on this platform: child subreapers are Linux's. Callers go
// on with a nil *Reaper.
func New() (*Reaper, error) {
	return nil, errors.New("reaper: a child subreaper needs Linux (prctl PR_SET_CHILD_SUBREAPER)")
}

func (r *Reaper) run(ctx context.Context) { <-ctx.Done() }
