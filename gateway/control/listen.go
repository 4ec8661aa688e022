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
	if err := PrepareDir(dir); err != nil {
		return nil, err
	}
	if err := clearStale(path); err != nil {
		return nil, err
	}
	// Short names: a socket's path is limited to about 104 bytes, and
	// this one is only two bytes longer than path.
	tmp, err := os.MkdirTemp(dir, ".c")
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
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
	fi, err := os.Lstat(bound)
	if err == nil {
		err = os.Rename(bound, path)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &Listener{ln: ln, Path: path, file: fi}, nil
}

// Listener is the listening control socket.
type Listener struct {
	ln   *net.UnixListener
	Path string
	file fs.FileInfo // the socket as bound, to remove only that

	once sync.Once
	err  error
}

// Close stops listening and removes the socket file. Safe to call more
// than once.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.err = l.ln.Close()
		// Only our socket: if another gateway has since put its own at
		// Path, it stays.
		if fi, err := os.Lstat(l.Path); err == nil && os.SameFile(fi, l.file) {
			if err := os.Remove(l.Path); err != nil && l.err == nil {
				l.err = err
			}
		}
	})
	return l.err
}

// PrepareDir makes sure the state directory dir exists, is a directory
// owned by this user, and is not reachable by group or others (it is
// tightened to 0700 if it is). Call it before creating anything in dir:
// a directory another user made could hold symlinks or planted files.
func PrepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state directory: %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("state directory: %s belongs to uid %d, not to this user (uid %d): use a directory of your own", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory: tighten %s to 0700: %w", dir, err)
		}
	}
	return nil
}

// Check reports, without changing anything, whether Listen could create
// the socket at path: nil if nothing is there or a stale socket is; an
// error wrapping ErrInUse if a gateway answers there; an error if
// something that is not a socket is in the way.
func Check(path string) error {
	_, err := stale(path)
	return err
}

// clearStale removes a socket at path that nobody answers on.
func clearStale(path string) error {
	found, err := stale(path)
	if err != nil || !found {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("control socket: remove stale %s: %w", path, err)
	}
	return nil
}

// stale reports whether a socket nobody answers on is at path.
func stale(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("control socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		what := "a special file"
		switch {
		case fi.Mode().IsRegular():
			what = "a regular file"
		case fi.IsDir():
			what = "a directory"
		case fi.Mode()&fs.ModeSymlink != 0:
			what = "a symbolic link"
		}
		return false, fmt.Errorf("control socket: %s exists and is not a socket (it is %s); move it away", path, what)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false, fmt.Errorf("control socket %s: %w", path, ErrInUse)
	}
	return true, nil
}
