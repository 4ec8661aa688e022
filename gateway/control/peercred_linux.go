package control

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerCred reads the credentials of the process on the other end of c,
// as the kernel recorded them at connect (SO_PEERCRED): they cannot be
// forged by the client.
func peerCred(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", credErr)
	}
	return Peer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}

// checkPeerProcess runs check on the peer's pid while it holds a pidfd of
// the very process that connected (SO_PEERCRED's pid is only a number:
// once that process exits, the number may be given to another process,
// and check would read the /proc entries of that one, say an operator's
// shell, instead of the runtime that connected and left the socket to its
// child). After check, the peer must still be alive, which proves the pid
// still named it all along. The pidfd comes from SO_PEERPIDFD (Linux 6.5);
// on older kernels check runs on the pid alone.
func checkPeerProcess(c *net.UnixConn, pid int, check func(pid int) error) error {
	if pid <= 0 {
		return check(pid) // no process of ours to hold
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("peer process: %w", err)
	}
	pidfd := -1
	var optErr error
	if err := raw.Control(func(fd uintptr) {
		pidfd, optErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	}); err != nil {
		return fmt.Errorf("peer process: %w", err)
	}
	switch {
	case errors.Is(optErr, unix.ENOPROTOOPT):
		return check(pid) // a kernel without SO_PEERPIDFD (before 6.5)
	case errors.Is(optErr, unix.ESRCH):
		return Errorf(CodePermission, "pid %d exited before it could be checked: refused", pid)
	case optErr != nil:
		return Errorf(CodePermission, "cannot hold the process of pid %d while checking it: SO_PEERPIDFD: %v: refused", pid, optErr)
	}
	defer unix.Close(pidfd)
	if err := check(pid); err != nil {
		return err
	}
	// A pidfd is readable once its process has exited.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Errorf(CodePermission, "cannot tell whether pid %d is still the process that connected: poll its pidfd: %v: refused", pid, err)
		}
		if n > 0 {
			return Errorf(CodePermission, "pid %d exited while it was being checked (its pid may name another process now): refused", pid)
		}
		return nil
	}
}
