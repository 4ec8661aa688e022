//go:build !linux

package control

import (
	"errors"
	"net"
)

// peerCred is not implemented on this platform: every connection is
// refused rather than trusted blindly.
func peerCred(*net.UnixConn) (Peer, error) {
	return Peer{}, errors.New("peer credentials are not supported on this platform")
}

// checkPeerProcess is never reached here (peerCred refuses every
// connection first); it refuses too, should that change.
func checkPeerProcess(_ *net.UnixConn, pid int, _ func(pid int) error) error {
	return Errorf(CodePermission, "cannot check pid %d: peer processes cannot be checked on this platform: refused", pid)
}
