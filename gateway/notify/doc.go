// Package notify tells people outside the terminal what the gateway
// recorded: a Cat-3 item waiting in the approval queue, an agent that
// failed, a reload refused. It sends events of the audit log to webhook
// targets listed in the operator's notify file (bcpgw run --notify FILE).
//
// # The file
//
// YAML, checked like agent definitions: unknown keys, bad values and
// patterns that match no event kind are errors at their file:line, all
// reported at once (Load). Each target has a name, a URL (https, or http
// to loopback only; or url_env naming a variable that holds it, for URLs
// that are secrets, as Slack's are), a format (json, slack, ntfy), the
// event kinds it wants as glob patterns, and optionally secret_env (the
// variable holding its signing key) and token_env (a bearer token). A
// variable named and not set is an error when the file is loaded, so the
// gateway fails at start, not at the first notification.
//
// # Delivery
//
// At least once, in order, one event at a time per target. Each target
// has a goroutine of its own (owned by the Notifier, stopped by Run's
// context or by Update) that reads the event log from the target's cursor,
// which the store keeps (store.NotifyCursor), and moves it past each event
// once it is sent, not wanted, or given up, in the same commit as the
// notify_sent or notify_failed event that says so. A restart resumes from
// the cursor: nothing is skipped, and only what was sent in the last
// moments before a crash can be sent again (at-least-once). A new target
// starts at the newest event; one whose cursor fell behind what retention
// deleted resumes at the oldest event kept, with a notify_gap event.
//
// Each notification carries an idempotency key, the same on every attempt
// (webhook-id, Idempotency-Key and the json format's id): the state
// file's random id and the event's seq. Attempts time out after 10s;
// network errors, timeouts, 408, 429 and 5xx are tried again after 1s,
// 2s, 4s ... (at most 300s); after 10 attempts the target is down
// (notify_down): the event is tried every 300s, nothing after it is sent,
// and once it goes through (notify_up) the target catches up from its
// cursor, so an outage within the retention window loses nothing.
// Another 4xx, or a redirect (never followed), gives up at once
// (notify_failed), as does a notification that fails before it reaches
// the network because of what it holds (not rendered, or a header no
// request can carry): that is no outage. 410 Gone disables the target (notify_disabled) until its URL
// changes. Requests are signed as Standard Webhooks specifies
// (webhook-id, webhook-timestamp, webhook-signature: v1, then the base64
// of the HMAC-SHA256 of "id.timestamp.body").
//
// # Safety
//
// A notification shows what the approval queue shows, never more, and
// cannot decide anything: see Message and Safe. The notifier's own events
// (notify_*) go only to targets that name them, and never to the target
// they are about, so that a failing target cannot feed on its failures.
package notify
