// Package gateway is the bcpgw daemon: it adapts the protocol core (bcp)
// and the checked definitions (agents) to processes, storage and sockets.
//
// So far it holds the admission decision for a Reader's publish
// ([JudgePublish]), the single place where "is this push allowed, and where
// does it go" is decided, shared by the running gateway and the operator's
// dry run, `bcpgw check`.
package gateway
