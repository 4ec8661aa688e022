package gateway

import (
	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// Auditor receives audit events. Implementations must be safe for
// concurrent use and must not block for long.
type Auditor interface {
	Audit(store.Event)
}

func truncatePayload(b []byte) []byte {
	if len(b) > store.MaxPayload {
		b = b[:store.MaxPayload]
	}
	return append([]byte(nil), b...)
}

// LogAuditor writes events to a logger: the auditor of sessions used
// without a store, and the log half of StoreAuditor.
type LogAuditor struct{ Logger hclog.Logger }

// chatty reports the events logged at debug level: there are several
// per turn.
func chatty(kind string) bool {
	switch kind {
	case "turn_done", "delivery_sent", "runtime_text", "runtime_tool_use", "runtime_tool_result":
		return true
	}
	return false
}

// Audit logs e at info level, warn for refusals, debug for the events
// that come several per turn.
func (a LogAuditor) Audit(e store.Event) {
	args := []any{"agent", e.Agent, "kind", e.Kind}
	if e.Peer != "" {
		args = append(args, "peer", e.Peer)
	}
	if e.Code != "" {
		args = append(args, "code", e.Code)
	}
	if e.Ref != "" {
		args = append(args, "ref", e.Ref)
	}
	if len(e.Payload) > 0 {
		args = append(args, "payload", string(e.Payload))
	}
	level := hclog.Info
	switch {
	case e.Code != "":
		level = hclog.Warn
	case chatty(e.Kind):
		level = hclog.Debug
	}
	// The detail goes in as a value, which the logger quotes when needed:
	// it can hold text a runtime chose, and must not forge log lines.
	a.Logger.Log(level, "audit", append(args, "detail", e.Detail)...)
}

// StoreAuditor records events durably in the store and logs them.
type StoreAuditor struct {
	Store *store.Store
	Log   LogAuditor
}

// Audit queues e for the store's next group commit, and logs it.
func (a StoreAuditor) Audit(e store.Event) {
	a.Store.Append(e)
	a.Log.Audit(e)
}
