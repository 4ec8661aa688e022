package control

import (
	"errors"
	"fmt"
)

// Error is a JSON-RPC error object. Code is one of the constants below and
// is stable; Reason is its name, also stable, for scripts that prefer
// words; Message is for people.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    *struct {
		Reason string `json:"reason"`
	} `json:"data,omitempty"`
}

// The error codes. The first five are JSON-RPC 2.0's own; the others are
// in its range for implementation-defined server errors.
const (
	CodeParseError     = -32700 // the line is not JSON
	CodeInvalidRequest = -32600 // not a JSON-RPC 2.0 request
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603

	CodeNotFound       = -32001 // no such approval item, agent or subscription
	CodeAlreadyDecided = -32002 // an approval item is decided once
	CodeHashMismatch   = -32003 // the content shown is not the content stored
	CodeExpired        = -32004 // the item expired before the decision
	CodeRevoked        = -32005 // its channel or subscription is gone; the item was dropped
	CodeNotRunning     = -32006 // the gateway is still starting
	CodePermission     = -32007 // the peer may not use this socket: its uid, its namespaces, or it descends from the gateway
	CodeAgentFailed    = -32008 // the agent crashed too often; start it again after fixing the cause
	CodeUnavailable    = -32009 // the gateway cannot do this now, or is shutting down
	CodeLimit          = -32010 // too many subscriptions or connections
	CodeInvalidDefs    = -32011 // reload: the definitions do not load; the running set stays
	CodeNotParked      = -32012 // deliveries.retry/discard: the delivery is not parked (the outbox owns it)
	// approvals.approve: this user's (uid's) approval of the item is
	// already counted; it needs the others' from other operators.
	CodeAlreadyApproved = -32013
)

// reasons names the codes.
var reasons = map[int]string{
	CodeParseError: "parse_error", CodeInvalidRequest: "invalid_request", CodeMethodNotFound: "method_not_found",
	CodeInvalidParams: "invalid_params", CodeInternal: "internal_error",
	CodeNotFound: "not_found", CodeAlreadyDecided: "already_decided", CodeHashMismatch: "hash_mismatch",
	CodeExpired: "expired", CodeRevoked: "revoked", CodeNotRunning: "not_running", CodePermission: "permission_denied",
	CodeAgentFailed: "agent_failed", CodeUnavailable: "unavailable", CodeLimit: "limit",
	CodeInvalidDefs: "definitions_invalid", CodeNotParked: "not_parked", CodeAlreadyApproved: "already_approved",
}

// Errorf returns an *Error with the code, its reason and a message.
func Errorf(code int, format string, args ...any) *Error {
	e := &Error{Code: code, Message: fmt.Sprintf(format, args...)}
	if r, ok := reasons[code]; ok {
		e.Data = &struct {
			Reason string `json:"reason"`
		}{r}
	}
	return e
}

// Error is the message, as people should read it.
func (e *Error) Error() string { return e.Message }

// Reason is the code's stable name ("already_decided").
func (e *Error) Reason() string {
	if e.Data != nil && e.Data.Reason != "" {
		return e.Data.Reason
	}
	return reasons[e.Code]
}

// Is makes errors.Is(err, &Error{Code: CodeAlreadyDecided}) match any
// error with that code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf returns err's code if it is (or wraps) an *Error, else 0.
func CodeOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
