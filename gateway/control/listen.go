package control

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrInUse is returned by Listen when a gateway already answers on the
// socket.
var ErrInUse = errors.New("another bcpgw is running with this state directory")

// Listen creates the control socket at path and listens on it.
//
// The socket must never be reachable by other users, not even for the
// instant between bind and chmod, and must not depend on the process
// umask (which is process-wide and so not ours to change). So the socket
// is bound inside a fresh 0700 directory next to path, made 0600 there,
// and renamed into place. The directory holding path must be a directory
// of ours; if it is reachable by others it is tightened to 0700.
//
// A stale socket at path (nobody answers on it) is replaced. A socket
// that answers means another gateway owns this state directory: ErrInUse.
// Anything at path that is not a socket is refused and left alone.
func Listen(path string) (*Listener, error) {
	dir := filepath.Dir(path)
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	if err := clearStale(path); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(dir, ".control-")
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, filepath.Base(path))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// The listener would unlink the temporary name on Close; the socket
	// lives at path now, and Listener.Close removes that.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(bound, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Rename(bound, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &Listener{ln: ln, Path: path}, nil
}

// Listener is the listening control socket.
type Listener struct {
	ln   *net.UnixListener
	Path string

	once sync.Once
	err  error
}

// Close stops listening and removes the socket file. Safe to call more
// than once.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.err = l.ln.Close()
		if err := os.Remove(l.Path); err != nil && !errors.Is(err, fs.ErrNotExist) && l.err == nil {
			l.err = err
		}
	})
	return l.err
}

// privateDir makes sure dir exists, is a directory owned by us, and is
// not reachable by group or others.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("control socket: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("control socket: %s belongs to uid %d, not to this user (uid %d)", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("control socket: tighten %s to 0700: %w", dir, err)
		}
	}
	return nil
}

// clearStale removes a socket at path that nobody answers on.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("control socket: %s exists and is not a socket (%s); move it away", path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("control socket %s: %w", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control socket: remove stale %s: %w", path, err)
	}
	return nil
}
