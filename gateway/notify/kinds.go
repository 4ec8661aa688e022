package notify

import (
	"fmt"
	"path"
	"strings"

	"github.com/bcpgw/bcpgw/bcp"
)

// Kinds lists the event kinds the gateway records, for checking a
// target's patterns: a pattern that matches none of them (nor a refusal
// code) is a typo, and an error rather than silence. TestKindsCoverSource
// keeps it in step with the code.
var Kinds = []string{
	// Agents and their sessions.
	"agent_failed", "agent_removed", "agent_reset", "agent_retiring", "agent_retry", "agent_stopped",
	"session_started", "session_stopped", "session_crashed", "session_idle", "session_killed", "session_throttled",
	"subscriptions_announced", "turn_done", "turn_timeout",
	"runtime_text", "runtime_tool_use", "runtime_tool_result", "runtime_error", "runtime_interrupted",
	// Traffic.
	"publish_accepted", "answer_accepted", "refused",
	"query_sent", "query_timeout", "query_cancelled",
	"push_filtered", "push_superseded", "batch_closed", "subscription_approved", "subscription_revoked",
	"approval_queued", "approval_partial", "approval_approved", "approval_rejected", "approval_expired", "approval_dropped",
	"delivery_sent", "delivery_retried", "delivery_acked", "delivery_failed", "delivery_parked",
	"delivery_requeued", "delivery_discarded", "dropped_revoked",
	"egress_ok", "egress_refused", "egress_failed", "egress_malformed", "egress_busy",
	// The gateway and its operators.
	"reload_ok", "reload_failed", "cron_failed", "retention_pruned", "control_refused",
	"operator_start", "operator_stop", "operator_prompt", "operator_backup", "operator_notify_test",
	// The notifier's own (see Notifier).
	KindSent, KindFailed, KindDisabled, KindEnabled, KindGap, KindDown, KindUp,
}

// The notifier's event kinds.
const (
	// KindSent: a notification was answered 2xx (Ref: the target;
	// Detail: the event's seq and kind, the status, the attempts).
	KindSent = "notify_sent"
	// KindFailed: a notification was given up: its endpoint answered a
	// 4xx other than 408, 410 and 429, which trying again cannot change.
	KindFailed = "notify_failed"
	// KindDown: a notification failed MaxAttempts times in a row; the
	// target waits on it, tried every MaxBackoff, and catches up from its
	// cursor once it goes through.
	KindDown = "notify_down"
	// KindUp: a target that was down answered again.
	KindUp = "notify_up"
	// KindDisabled: the endpoint answered 410 Gone; nothing more is sent
	// to it until its URL changes.
	KindDisabled = "notify_disabled"
	// KindEnabled: a disabled target's URL changed in the notify file.
	KindEnabled = "notify_enabled"
	// KindGap: retention deleted events the target had not been sent.
	KindGap = "notify_gap"
	// KindTest is the kind of the sample bcpgw notify test sends; never
	// stored.
	KindTest = "notify_test"
)

// hints say what to write for a kind people expect and the gateway names
// otherwise.
var hints = map[string]string{
	"session_failed":  "agent_failed (an agent that cannot start, or crashed too often, is marked failed)",
	"approval_needed": "approval_queued",
	"egress_denied":   "egress_refused",
	"reload_error":    "reload_failed",
	"budget_exceeded": "budget_exhausted (a refusal's code)",
}

// CheckPattern reports whether p is a valid pattern that matches at least
// one event kind in Kinds or one refusal code.
func CheckPattern(p string) error {
	if _, err := path.Match(p, ""); err != nil {
		return fmt.Errorf("%q is not a valid pattern (* ? [...] as in shell globs)", p)
	}
	for _, k := range Kinds {
		if strings.HasPrefix(k, "notify_") && !strings.HasPrefix(p, "notify_") {
			continue
		}
		if ok, _ := path.Match(p, k); ok {
			return nil
		}
	}
	for _, c := range bcp.Codes {
		if ok, _ := path.Match(p, string(c)); ok {
			return nil
		}
	}
	if h, ok := hints[p]; ok {
		return fmt.Errorf("%q is not an event kind: did you mean %s?", p, h)
	}
	return fmt.Errorf("%q matches no event kind or refusal code (see the list in docs/operating.md, or bcpgw events)", p)
}
