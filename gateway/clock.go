package gateway

import "github.com/bcpgw/bcpgw/internal/clock"

// Clock is the time source of sessions and supervisors (package
// internal/clock): injected so that backoff and timeout tests advance time
// instead of sleeping.
type Clock = clock.Clock

// Timer is a one-shot timer from a Clock.
type Timer = clock.Timer

// SystemClock is the real clock.
type SystemClock = clock.System
