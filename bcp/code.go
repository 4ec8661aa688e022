package bcp

import (
	"errors"
	"fmt"
)

// Code is a stable error code from the protocol's table. Every refusal's
// detail or reason starts with one, and the wire, the control API and the
// audit log all use the same strings.
type Code string

// The error codes of PROTOCOL.md section 6.
const (
	SubscriptionNotFound  Code = "subscription_not_found"
	ValidationFailed      Code = "validation_failed"
	BudgetExhausted       Code = "budget_exhausted"
	ApprovalRejected      Code = "approval_rejected"
	ApprovalExpired       Code = "approval_expired"
	ControllerUnavailable Code = "controller_unavailable"
	NoChannel             Code = "no_channel"
	CategoryNotAllowed    Code = "category_not_allowed"
	QueryLimit            Code = "query_limit"
	QueryNotFound         Code = "query_not_found"
	QueryTimeout          Code = "query_timeout"
	ToolNotAllowed        Code = "tool_not_allowed"
	ProtocolError         Code = "protocol_error"
	// RateLimited is bcpgw's own: a channel's rate limit (TriOnyx
	// definitions, --compat trionyx) refused a query or push.
	RateLimited Code = "rate_limited"
	// BacklogFull is bcpgw's own: the Controller has too many of this
	// Reader's deliveries still to acknowledge (bcpgw run --max-backlog).
	// Nothing was charged; the push may be sent again later.
	BacklogFull Code = "backlog_full"
	// SubscribeLimit is bcpgw's own: a Controller already has the most
	// subscription requests (BCPSubscribe) an operator has yet to decide.
	SubscribeLimit Code = "subscribe_limit"
)

// Codes lists every code, in the protocol's order.
var Codes = []Code{
	SubscriptionNotFound, ValidationFailed, BudgetExhausted, ApprovalRejected,
	ApprovalExpired, ControllerUnavailable, NoChannel, CategoryNotAllowed,
	QueryLimit, QueryNotFound, QueryTimeout, ToolNotAllowed, ProtocolError,
	RateLimited, BacklogFull, SubscribeLimit,
}

// Error is a refusal: a code for programs and a detail for people.
// Its text is "code: detail", the form the protocol puts on the wire.
type Error struct {
	Code   Code
	Detail string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Detail }

// Errorf returns an *Error with the given code and a formatted detail.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first *Error in err's chain, or "" if
// there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
