package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
)

// ApprovalStatus is where an approval item is. Every status but pending is
// final: an item is decided once.
type ApprovalStatus string

// The approval statuses.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalRejected ApprovalStatus = "rejected"
	ApprovalExpired  ApprovalStatus = "expired"
	ApprovalDropped  ApprovalStatus = "dropped" // its channel or subscription was revoked
)

// Errors of Decide. Callers branch on them with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrDecided      = errors.New("already decided")
	ErrHashMismatch = errors.New("content hash does not match the item")
	ErrExpired      = errors.New("expired")
	// ErrAlreadyApproved is an approval by a decider whose approval of
	// the item is already counted: an item that needs several approvals
	// (Approval.Required) needs them from distinct uids. Nothing changes.
	ErrAlreadyApproved = errors.New("already approved by this decider")

	errNotADecision = errors.New("not a decision")
)

// Approval is an item in the operator's queue: the exact normalized
// content a reviewer sees, and what approving it delivers.
type Approval struct {
	Seq            int64
	ID             string // set by AddApproval if empty
	Status         ApprovalStatus
	Controller     string
	Reader         string
	SubscriptionID string
	QueryID        string
	RequestID      string
	Category       bcp.Category
	Directive      string          // what the Controller asked for (Cat-3)
	Response       json.RawMessage // the normalized response: what is shown and delivered
	SHA256         string          // hex SHA-256 of Response; an approval must name it
	Anomalies      []bcp.Anomaly
	Bits           float64
	CreatedAt      time.Time
	ExpiresAt      time.Time
	DecidedAt      time.Time
	// DecidedBy made the final decision: the operator whose approval
	// completed the quorum, who rejected it, or the gateway itself
	// (Name "bcpgw") for an expiry or a drop.
	DecidedBy     Decider
	DecidedSHA256 string // the content hash the decider was shown
	Reason        string // why it was rejected, expired or dropped
	Note          string // the reviewer's note on an approval
	// Required is how many approvals from distinct deciders (by uid)
	// release the item: its approval policy's, fixed when it was queued
	// (as its hash and expiry are), whatever a reload changes later.
	// AddApproval stores 0 as 1.
	Required int
	// Grants are the approvals counted so far, oldest first: while the
	// item is pending, fewer than Required; once approved, Required of
	// them, the last by DecidedBy. A rejection keeps those given before
	// it.
	Grants []Grant
	// Kind is what approving the item does: KindData (empty) delivers
	// Response; KindSubscription adds the subscription SubscriptionID
	// whose spec Response is (see RuntimeSubscription).
	Kind ApprovalKind
}

// ApprovalKind is what approving an item does.
type ApprovalKind string

// The kinds of approval items.
const (
	KindData         ApprovalKind = ""             // a push or an answer, delivered when approved
	KindSubscription ApprovalKind = "subscription" // a Controller's request for a subscription (BCPSubscribe)
)

// Grant is one operator's approval of an item, counted towards its
// Required.
type Grant struct {
	By     Decider   `json:"by"`
	SHA256 string    `json:"sha256"` // always the item's: an approval of other content is refused
	Note   string    `json:"note,omitempty"`
	At     time.Time `json:"at"`
}

// Progress is the "1 of 2 approvals" of an item that needs more
// than one; empty when it needs one.
func (a *Approval) Progress() string {
	if a.Required <= 1 {
		return ""
	}
	return fmt.Sprintf("%d of %d approvals", len(a.Grants), a.Required)
}

// ContentHash is the hex SHA-256 an approval is bound to.
func ContentHash(response []byte) string {
	sum := sha256.Sum256(response)
	return hex.EncodeToString(sum[:])
}

const approvalColumns = `seq, id, status, controller, reader, subscription_id, query_id, request_id, category,
	directive, response, sha256, anomalies, bits, created_at, expires_at, decided_at, decided_by, reason, note,
	decided_uid, decided_pid, decided_sha256, required, grants, kind`

// AddApproval stores a pending item and its events in one durable commit.
// It sets a.Seq, a.Status, a.SHA256 and, if empty, a.ID.
func (s *Store) AddApproval(ctx context.Context, a *Approval, events ...Event) error {
	stored := *a
	err := s.write(ctx, addApproval(&stored, events))
	if err == nil {
		*a = stored
	}
	return err
}

// AddApprovalThen is AddApproval without waiting: then receives the
// stored item, or the error, once the commit is durable. Like
// AddDeliveryThen, then runs on the writer goroutine and must not block.
func (s *Store) AddApprovalThen(a Approval, events []Event, then func(Approval, error)) {
	s.writeThen(addApproval(&a, events), func(err error) { then(a, err) })
}

func addApproval(stored *Approval, events []Event) func(*wtx) error {
	stored.Status = ApprovalPending
	stored.SHA256 = ContentHash(stored.Response)
	stored.Required = max(stored.Required, 1)
	stored.Grants = nil
	if stored.ID == "" {
		stored.ID = NewID("ap-", 8)
	}
	events = withRef(events, stored.ID)
	return func(tx *wtx) error {
		anomalies, err := json.Marshal(nonNilAnomalies(stored.Anomalies))
		if err != nil {
			return err
		}
		res, err := tx.Exec(sqlInsertApproval,
			stored.ID, string(stored.Status), stored.Controller, stored.Reader, stored.SubscriptionID, stored.QueryID,
			stored.RequestID, int(stored.Category), stored.Directive, string(stored.Response), stored.SHA256,
			string(anomalies), stored.Bits, millis(stored.CreatedAt), millis(stored.ExpiresAt), stored.Required)
		if err != nil {
			return fmt.Errorf("insert approval: %w", err)
		}
		if stored.Seq, err = res.LastInsertId(); err != nil {
			return err
		}
		if stored.Kind != KindData {
			if _, err := tx.Exec(`UPDATE approvals SET kind = ? WHERE seq = ?`, string(stored.Kind), stored.Seq); err != nil {
				return fmt.Errorf("insert approval: %w", err)
			}
		}
		return insertEvents(tx, events)
	}
}

// Decider is who decided: an operator, from the control socket's peer
// credentials, or the gateway itself for its own decisions (expiry,
// revocation: Name "bcpgw", PID 0). It is the one record of "who decided"
// for approval items and parked deliveries alike; the control socket's
// wire type (control.Peer) is turned into it in one place
// (gateway.decider).
//
// UID is the decider's identity when approvals are counted: two
// approvals with the same UID are one person's, whatever the pid or the
// terminal.
type Decider struct {
	Name string `json:"name"` // a user name; shown in events and logs
	UID  int    `json:"uid"`  // the user's uid, when PID is set
	PID  int    `json:"pid"`  // the client's pid; 0 when not known (the gateway's own decisions)
}

// String is how a decider appears in events and logs: "alice (uid 1000,
// pid 4242)", or just the name when the pid is not known (the gateway's
// own decisions).
func (d Decider) String() string {
	if d.PID == 0 {
		return d.Name
	}
	return fmt.Sprintf("%s (uid %d, pid %d)", d.Name, d.UID, d.PID)
}

// Decision is an operator's (or the gateway's) decision on a pending item.
type Decision struct {
	ID     string
	Status ApprovalStatus // approved, rejected, expired or dropped
	// SHA256 is the hash of the content the reviewer was shown. Required
	// to approve; when set on a rejection it must match too.
	SHA256 string
	By     Decider
	Reason string
	Note   string
	At     time.Time
	// Released, if set, is given the delivery an approval releases, on
	// the store's writer once the decision is durable: in commit order
	// with the callbacks of other writes (AddDeliveryThen's...), so that
	// a queue fed by them sees the deliveries in the order of their seqs.
	// It must not block.
	Released func(Delivery)
}

// Decide applies d to a pending item in one durable commit: the item's new
// status, an approval_<status> event and, on approval, the delivery it
// releases, which is returned (for a KindSubscription item, the active
// subscription it adds instead, and no delivery). Exactly one decision is ever applied to an
// item: a second one gets ErrDecided. Approving needs the hash of the
// content shown (ErrHashMismatch otherwise) and an item that has not
// expired at d.At (ErrExpired: the item is then marked expired in the
// same commit, and the returned approval says so).
//
// An item that needs more than one approval (Required) counts each as a
// Grant: until Required distinct deciders (by uid) have approved it, an
// approval is stored as a grant with an approval_partial event, the item
// stays pending and no delivery is returned; the approval that completes
// the quorum decides it as above. An approval by a decider already
// counted gets ErrAlreadyApproved and changes nothing. A rejection by
// anyone, a grantor included, decides it at once.
func (s *Store) Decide(ctx context.Context, d Decision) (*Approval, *Delivery, error) {
	switch d.Status {
	case ApprovalApproved, ApprovalRejected, ApprovalExpired, ApprovalDropped:
	default:
		return nil, nil, fmt.Errorf("approval %s: status %q: %w", d.ID, d.Status, errNotADecision)
	}
	var a *Approval
	var dl *Delivery
	var expired bool
	released := func() {
		if dl != nil && d.Released != nil {
			d.Released(*dl)
		}
	}
	err := s.writeCommitted(ctx, func(tx *wtx) error {
		a, dl, expired = nil, nil, false
		items, err := scanApprovals(tx.Query(sqlApprovalByID, d.ID))
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return fmt.Errorf("approval %s: %w", d.ID, ErrNotFound)
		}
		a = &items[0]
		switch {
		case a.Status != ApprovalPending:
			return fmt.Errorf("approval %s was already %s: %w", a.ID, a.Status, ErrDecided)
		case d.SHA256 != "" && d.SHA256 != a.SHA256, d.Status == ApprovalApproved && d.SHA256 == "":
			return fmt.Errorf("approval %s: %w (the content shown is not the content stored)", a.ID, ErrHashMismatch)
		}
		status, reason := d.Status, d.Reason
		if status == ApprovalApproved && !d.At.Before(a.ExpiresAt) {
			status, reason, expired = ApprovalExpired, "expired before it was approved", true
		}
		if status == ApprovalApproved {
			for _, g := range a.Grants {
				if g.By.UID == d.By.UID {
					return fmt.Errorf("approval %s: uid %d approved it at %s: %w", a.ID, d.By.UID, g.At.UTC().Format(time.RFC3339), ErrAlreadyApproved)
				}
			}
			a.Grants = append(a.Grants, Grant{By: d.By, SHA256: d.SHA256, Note: d.Note, At: d.At})
			if len(a.Grants) < a.Required {
				return grant(tx, a)
			}
		}
		grants, err := json.Marshal(a.Grants)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(sqlDecideApproval,
			string(status), millis(d.At), d.By.Name, reason, d.Note, d.By.UID, d.By.PID, d.SHA256, nonNullJSON(grants), a.ID); err != nil {
			return fmt.Errorf("decide approval: %w", err)
		}
		a.Status, a.DecidedAt, a.DecidedBy, a.Reason, a.Note, a.DecidedSHA256 = status, d.At, d.By, reason, d.Note, d.SHA256
		if status == ApprovalApproved && a.Kind == KindSubscription {
			if err := insertRuntimeSubscription(tx, a); err != nil {
				return err
			}
		} else if status == ApprovalApproved {
			dl = &Delivery{
				Controller: a.Controller, Reader: a.Reader, SubscriptionID: a.SubscriptionID, QueryID: a.QueryID,
				RequestID: a.RequestID, ApprovalID: a.ID, Category: a.Category, Response: a.Response,
				Anomalies: a.Anomalies, Bits: a.Bits, CreatedAt: d.At,
			}
			if err := insertDelivery(tx, dl); err != nil {
				return err
			}
		}
		detail := fmt.Sprintf("%s by %s", status, d.By)
		if status == ApprovalApproved && len(a.Grants) > 1 {
			detail = fmt.Sprintf("%s by %s", status, grantors(a.Grants))
		}
		if reason != "" {
			detail += ": " + reason
		}
		return insertEvents(tx, []Event{{
			Time: d.At, Kind: "approval_" + string(status), Agent: a.Reader, Peer: a.Controller,
			Detail: detail, Category: int(a.Category), Bits: a.Bits, Ref: a.ID,
		}})
	}, released)
	if err != nil {
		return a, nil, err
	}
	if expired {
		return a, nil, fmt.Errorf("approval %s: %w", a.ID, ErrExpired)
	}
	return a, dl, nil
}

// grant stores the last of a.Grants, which leaves a still pending, with
// its approval_partial event: "approval 1 of 2 by alice (uid 1000, pid
// 4242); waits for 1 more from another operator".
func grant(tx *wtx, a *Approval) error {
	grants, err := json.Marshal(a.Grants)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(sqlGrantApproval, string(grants), a.ID); err != nil {
		return fmt.Errorf("record approval: %w", err)
	}
	g := a.Grants[len(a.Grants)-1]
	return insertEvents(tx, []Event{{
		Time: g.At, Kind: "approval_partial", Agent: a.Reader, Peer: a.Controller,
		Detail:   fmt.Sprintf("approval %d of %d by %s; waits for %d more from another operator", len(a.Grants), a.Required, g.By, a.Required-len(a.Grants)),
		Category: int(a.Category), Bits: a.Bits, Ref: a.ID,
	}})
}

// grantors names the deciders of grants: "alice (uid 1000, pid 42) and
// bob (uid 1001, pid 43)".
func grantors(grants []Grant) string {
	names := make([]string, len(grants))
	for i, g := range grants {
		names[i] = g.By.String()
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// nonNullJSON stores a nil list as [] rather than null.
func nonNullJSON(b []byte) string {
	if string(b) == "null" {
		return "[]"
	}
	return string(b)
}

// DueForExpiry returns the pending items whose expiry is at or before now.
func (s *Store) DueForExpiry(ctx context.Context, now time.Time) ([]Approval, error) {
	return scanApprovals(s.rdb.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals
		WHERE status = 'pending' AND expires_at <= ? ORDER BY seq`, millis(now)))
}

// Approvals returns the items with the given status (all when empty),
// oldest first.
func (s *Store) Approvals(ctx context.Context, status ApprovalStatus) ([]Approval, error) {
	if status == "" {
		return scanApprovals(s.rdb.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals ORDER BY seq`))
	}
	return scanApprovals(s.rdb.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE status = ? ORDER BY seq`, string(status)))
}

// ApprovalsAfter returns a page of the items with the given status (all
// when empty): at most limit items with Seq > after, oldest first. The
// page is a range of approvals_by_status_seq (or of seq itself), so its
// cost follows limit, not the length of the queue; pass the last Seq of
// one page as after to read the next.
func (s *Store) ApprovalsAfter(ctx context.Context, status ApprovalStatus, after int64, limit int) ([]Approval, error) {
	if limit <= 0 {
		return nil, nil
	}
	if status == "" {
		return scanApprovals(s.rdb.QueryContext(ctx, sqlApprovalsAfter, after, limit))
	}
	return scanApprovals(s.rdb.QueryContext(ctx, sqlApprovalsByStatusAfter, string(status), after, limit))
}

// The statements of ApprovalsAfter (the plan test reads them).
const (
	sqlApprovalsAfter         = `SELECT ` + approvalColumns + ` FROM approvals WHERE seq > ? ORDER BY seq LIMIT ?`
	sqlApprovalsByStatusAfter = `SELECT ` + approvalColumns + ` FROM approvals WHERE status = ? AND seq > ? ORDER BY seq LIMIT ?`
)

// Approval returns one item, or ErrNotFound.
func (s *Store) Approval(ctx context.Context, id string) (*Approval, error) {
	items, err := scanApprovals(s.rdb.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("approval %s: %w", id, ErrNotFound)
	}
	return &items[0], nil
}

func scanApprovals(rows *sql.Rows, err error) ([]Approval, error) {
	if err != nil {
		return nil, fmt.Errorf("read approvals: %w", err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		var a Approval
		var status, response, anomalies, grants, kind string
		var category int
		var created, expires, decided int64
		if err := rows.Scan(&a.Seq, &a.ID, &status, &a.Controller, &a.Reader, &a.SubscriptionID, &a.QueryID, &a.RequestID,
			&category, &a.Directive, &response, &a.SHA256, &anomalies, &a.Bits, &created, &expires, &decided,
			&a.DecidedBy.Name, &a.Reason, &a.Note, &a.DecidedBy.UID, &a.DecidedBy.PID, &a.DecidedSHA256, &a.Required, &grants, &kind); err != nil {
			return nil, fmt.Errorf("read approvals: %w", err)
		}
		a.Status, a.Category, a.Response = ApprovalStatus(status), bcp.Category(category), json.RawMessage(response)
		a.Kind = ApprovalKind(kind)
		a.CreatedAt, a.ExpiresAt, a.DecidedAt = fromMillis(created), fromMillis(expires), fromMillis(decided)
		if err := json.Unmarshal([]byte(anomalies), &a.Anomalies); err != nil {
			return nil, fmt.Errorf("read approval %s: anomalies: %w", a.ID, err)
		}
		if err := json.Unmarshal([]byte(grants), &a.Grants); err != nil {
			return nil, fmt.Errorf("read approval %s: approvals: %w", a.ID, err)
		}
		if len(a.Grants) == 0 {
			a.Grants = nil // as AddApproval leaves it
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
