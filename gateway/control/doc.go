// Package control is the gateway's operator API: JSON-RPC 2.0 over a Unix
// socket (STATE/control.sock), one JSON object per line in each direction.
//
// The package holds both ends and the types they share, so the command
// line, the terminal approval queue and the gateway cannot drift apart:
// Listen and Server serve a Backend (the gateway implements it); Dial and
// Client call it.
//
// Only the user running the gateway, and root, may connect, and the
// members of an operator group when the gateway has one
// (ServerConfig.OperatorGroup, ListenGroup: the directory 0710 and the
// socket 0660 with that group; a root gateway only). The socket is
// created 0600, inside a 0700 directory, through a private temporary
// directory so it is never reachable by anyone else, not even between
// bind and chmod; then every connection's peer credentials (SO_PEERCRED)
// are checked, so a loosened mode cannot let another uid in. Then the
// peer process itself (PeerPolicy): one in another user or pid namespace
// than the gateway's (a sandboxed runtime, a container) or one that
// descends from the gateway (a runtime, or anything it started: the
// gateway is a child subreaper, so orphans stay its descendants) is
// refused too, and the refusal is audited as control_refused. Root may use
// the socket of a gateway running as another user only where it can read
// that gateway's namespaces; otherwise it is refused, and should connect
// as the gateway's user. Decisions on approval items record the deciding
// user, uid and pid from those credentials; an item whose policy needs
// several approvals counts one per uid.
//
// Events reach subscribers as notifications (requests without an id),
// method "event". A subscription reads the durable event log from its
// cursor, so a slow client falls behind and catches up without gaps and
// without the gateway buffering for it.
//
// No client can lock the operator out (see Server for the reasoning).
// The limits, with their ServerConfig defaults:
//
//	MaxConns      64     connections at once
//	ReservedConns 8      of them that connections following events may not hold
//	IdleTimeout   5m     a connection idle that long is closed
//	LineTimeout   10s    a request line begun must end (newline) within it
//	WriteTimeout  10s    a line the client leaves unread that long closes it
//
// A connection is idle when it has sent nothing since its last answer (or
// since it connected), has no request in flight and follows no events. A
// connection that follows events is never idle: the approvals TUI and
// bcpgw events --follow stay connected for as long as they run, events
// or not. Five minutes lets a script pause between calls; ten seconds is
// ample for a program to write a line of at most 1 MiB on a local socket
// (paste, do not type, a request into socat). When all MaxConns are taken,
// a new connection takes the slot of the one idle the longest (half a line
// sent counts as idle); it is refused only if none is idle. Each
// connection the server ends this way gets one last line, an error with
// id null saying why (limit, invalid_request or unavailable), which
// Client reports as the reason the connection ended.
//
// Error codes are stable; each also carries its name as data.reason:
//
//	-32700 parse_error       the line is not JSON
//	-32600 invalid_request   not a JSON-RPC 2.0 request (batches are not supported)
//	-32601 method_not_found
//	-32602 invalid_params    missing, unknown or malformed params
//	-32603 internal_error
//	-32001 not_found         no such approval item, agent or subscription
//	-32002 already_decided   an approval item is decided once
//	-32003 hash_mismatch     the content shown is not the content stored
//	-32004 expired           the item expired before the decision
//	-32005 revoked           its channel or subscription is gone; the item was dropped
//	-32006 not_running       the gateway is still starting (decisions wait for its outbox)
//	-32007 permission_denied the peer may not use the socket (its uid, its namespaces, or it descends from the gateway)
//	-32008 agent_failed      the agent crashed too often
//	-32009 unavailable       the gateway cannot do this now, or is shutting down (see the message)
//	-32010 limit             too many subscriptions or connections
//	-32011 definitions_invalid  reload: the definitions do not load; the running set stays in force
//	-32012 not_parked        deliveries.retry/discard: only a parked delivery is the operator's
//	-32013 already_approved  approvals.approve: this uid's approval of the item is already
//	                         counted; an item that needs several needs them from other uids
package control
