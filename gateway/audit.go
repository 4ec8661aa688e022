package gateway

import (
	"time"

	"github.com/hashicorp/go-hclog"
)

// Event is one audit record: something a session or the router did or
// refused. Durable storage with sequence numbers comes with the store;
// until then events go to an Auditor.
type Event struct {
	Time   time.Time
	Agent  string
	Kind   string // e.g. session_started, refused, runtime_error
	Code   string // an error code for refusals (bcp.Code), else empty
	Detail string
	// Payload is the offending input, truncated, kept for forensics.
	Payload []byte
}

// Auditor receives audit events. Implementations must be safe for
// concurrent use and must not block for long.
type Auditor interface {
	Audit(Event)
}

// maxAuditPayload bounds Event.Payload.
const maxAuditPayload = 1024

func truncatePayload(b []byte) []byte {
	if len(b) > maxAuditPayload {
		b = b[:maxAuditPayload]
	}
	return append([]byte(nil), b...)
}

// LogAuditor writes events to a logger. It is the auditor of a gateway
// without a store.
type LogAuditor struct{ Logger hclog.Logger }

// Audit logs e at info level, or warn for refusals.
func (a LogAuditor) Audit(e Event) {
	args := []any{"agent", e.Agent, "kind", e.Kind}
	if e.Code != "" {
		args = append(args, "code", e.Code)
	}
	if len(e.Payload) > 0 {
		args = append(args, "payload", string(e.Payload))
	}
	level := hclog.Info
	if e.Code != "" {
		level = hclog.Warn
	}
	a.Logger.Log(level, "audit: "+e.Detail, args...)
}
