package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	DecidedBy      string // a user name, or "bcpgw" for the gateway's own decisions
	DecidedUID     int    // the decider's uid from the control socket, when DecidedPID is set
	DecidedPID     int    // the deciding client's pid; 0 when not known
	DecidedSHA256  string // the content hash the decider was shown
	Reason         string // why it was rejected, expired or dropped
	Note           string // the reviewer's note on an approval
}

// ContentHash is the hex SHA-256 an approval is bound to.
func ContentHash(response []byte) string {
	sum := sha256.Sum256(response)
	return hex.EncodeToString(sum[:])
}

const approvalColumns = `seq, id, status, controller, reader, subscription_id, query_id, request_id, category,
	directive, response, sha256, anomalies, bits, created_at, expires_at, decided_at, decided_by, reason, note,
	decided_uid, decided_pid, decided_sha256`

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
			string(anomalies), stored.Bits, millis(stored.CreatedAt), millis(stored.ExpiresAt))
		if err != nil {
			return fmt.Errorf("insert approval: %w", err)
		}
		if stored.Seq, err = res.LastInsertId(); err != nil {
			return err
		}
		return insertEvents(tx, events)
	}
}

// Decision is an operator's (or the gateway's) decision on a pending item.
type Decision struct {
	ID     string
	Status ApprovalStatus // approved, rejected, expired or dropped
	// SHA256 is the hash of the content the reviewer was shown. Required
	// to approve; when set on a rejection it must match too.
	SHA256 string
	By     string // who decided: a user name, or "bcpgw"
	UID    int    // the decider's uid, when PID is set
	PID    int    // the deciding client's pid; 0 when not known (the gateway's own decisions)
	Reason string
	Note   string
	At     time.Time
}

// DeciderText is how a decider appears in events and logs: "alice (uid
// 1000, pid 4242)", or just the name when the pid is not known (the
// gateway's own decisions).
func DeciderText(name string, uid, pid int) string {
	if pid == 0 {
		return name
	}
	return fmt.Sprintf("%s (uid %d, pid %d)", name, uid, pid)
}

// Decide applies d to a pending item in one durable commit: the item's new
// status, an approval_<status> event and, on approval, the delivery it
// releases, which is returned. Exactly one decision is ever applied to an item: a second one
// gets ErrDecided. Approving needs the hash of the content shown
// (ErrHashMismatch otherwise) and an item that has not expired at d.At
// (ErrExpired: the item is then marked expired in the same commit, and
// the returned approval says so).
func (s *Store) Decide(ctx context.Context, d Decision) (*Approval, *Delivery, error) {
	switch d.Status {
	case ApprovalApproved, ApprovalRejected, ApprovalExpired, ApprovalDropped:
	default:
		return nil, nil, fmt.Errorf("approval %s: status %q: %w", d.ID, d.Status, errNotADecision)
	}
	var a *Approval
	var dl *Delivery
	var expired bool
	err := s.write(ctx, func(tx *wtx) error {
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
		if _, err := tx.Exec(sqlDecideApproval,
			string(status), millis(d.At), d.By, reason, d.Note, d.UID, d.PID, d.SHA256, a.ID); err != nil {
			return fmt.Errorf("decide approval: %w", err)
		}
		a.Status, a.DecidedAt, a.DecidedBy, a.Reason, a.Note = status, d.At, d.By, reason, d.Note
		a.DecidedUID, a.DecidedPID, a.DecidedSHA256 = d.UID, d.PID, d.SHA256
		if status == ApprovalApproved {
			dl = &Delivery{
				Controller: a.Controller, Reader: a.Reader, SubscriptionID: a.SubscriptionID, QueryID: a.QueryID,
				RequestID: a.RequestID, ApprovalID: a.ID, Category: a.Category, Response: a.Response,
				Anomalies: a.Anomalies, Bits: a.Bits, CreatedAt: d.At,
			}
			if err := insertDelivery(tx, dl); err != nil {
				return err
			}
		}
		detail := fmt.Sprintf("%s by %s", status, DeciderText(d.By, d.UID, d.PID))
		if reason != "" {
			detail += ": " + reason
		}
		return insertEvents(tx, []Event{{
			Time: d.At, Kind: "approval_" + string(status), Agent: a.Reader, Peer: a.Controller,
			Detail: detail, Category: int(a.Category), Bits: a.Bits, Ref: a.ID,
		}})
	})
	if err != nil {
		return a, nil, err
	}
	if expired {
		return a, nil, fmt.Errorf("approval %s: %w", a.ID, ErrExpired)
	}
	return a, dl, nil
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
		var status, response, anomalies string
		var category int
		var created, expires, decided int64
		if err := rows.Scan(&a.Seq, &a.ID, &status, &a.Controller, &a.Reader, &a.SubscriptionID, &a.QueryID, &a.RequestID,
			&category, &a.Directive, &response, &a.SHA256, &anomalies, &a.Bits, &created, &expires, &decided,
			&a.DecidedBy, &a.Reason, &a.Note, &a.DecidedUID, &a.DecidedPID, &a.DecidedSHA256); err != nil {
			return nil, fmt.Errorf("read approvals: %w", err)
		}
		a.Status, a.Category, a.Response = ApprovalStatus(status), bcp.Category(category), json.RawMessage(response)
		a.CreatedAt, a.ExpiresAt, a.DecidedAt = fromMillis(created), fromMillis(expires), fromMillis(decided)
		if err := json.Unmarshal([]byte(anomalies), &a.Anomalies); err != nil {
			return nil, fmt.Errorf("read approval %s: anomalies: %w", a.ID, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}
