// Package unixsock creates unix sockets that only their owner can reach,
// for the gateway's control socket (gateway/control) and each agent's
// egress proxy socket (gateway/egress).
//
// It exists so that both get the same care from one piece of code. A
// socket bound at its path and then chmodded would be reachable by other
// users for the instant between bind and chmod, and the umask that would
// narrow it is process-wide and so not ours to change. So Listen binds
// the socket inside a fresh 0700 directory next to its path, makes it
// 0600 there, and renames it into place. What is already at the path is
// judged first: a stale socket (nobody answers on it) is replaced, a
// socket that answers is refused as in use, and anything that is not a
// socket is refused and left alone.
//
// The errors are each caller's own: a Kind gives the words they begin
// with and the error a socket in use wraps.
package unixsock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Kind says whose sockets these are.
type Kind struct {
	// Name begins every error: with "control socket", an error reads
	// "control socket: ..." or, for a socket in use,
	// "control socket PATH: " and InUse.
	Name string
	// InUse is wrapped by the error for a path where a listener
	// answers, for errors.Is. It must not be nil.
	InUse error
	// TempPrefix begins the name of the private directory the socket is
	// bound in, next to its path. Keep it short: a socket's path is
	// limited to about 104 bytes, and the temporary one is len(TempPrefix)
	// plus about 12 bytes longer than the final one.
	TempPrefix string
	// Group, when above 0, is a group whose members may connect too: the
	// socket is made 0660 and given that group, in the private directory,
	// before it is renamed into place. (The directory holding path must
	// let them through as well.)
	Group int
}

// testHookBound, if set, is called with the bound socket's temporary
// path just after bind, before chmod and rename.
var testHookBound func(bound string)

// Listen binds a unix socket at path that is never reachable by another
// user: it is bound in a fresh 0700 directory next to path, made 0600
// there, and renamed into place. What is at path first goes through
// ClearStale. The listener does not unlink path on Close: use Close with
// the returned FileInfo, which is the socket as bound, so that only this
// socket is removed.
func (k Kind) Listen(path string) (*net.UnixListener, fs.FileInfo, error) {
	if err := k.ClearStale(path); err != nil {
		return nil, nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), k.TempPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", k.Name, err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", k.Name, err)
	}
	// The listener would unlink the temporary name on Close; the socket
	// lives at path once renamed, and Close removes it there.
	ln.SetUnlinkOnClose(false)
	if testHookBound != nil {
		testHookBound(bound)
	}
	mode := os.FileMode(0o600)
	if k.Group > 0 {
		mode = 0o660
		if err := os.Lchown(bound, -1, k.Group); err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("%s: give it group %d: %w", k.Name, k.Group, err)
		}
	}
	if err := os.Chmod(bound, mode); err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("%s: %w", k.Name, err)
	}
	fi, err := os.Lstat(bound)
	if err == nil {
		err = os.Rename(bound, path)
	}
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("%s: %w", k.Name, err)
	}
	return ln, fi, nil
}

// Close closes ln and removes its socket file at path, only if path is
// still bound, the socket Listen made (another listener may have put its
// own there since). It returns the first error.
func Close(ln *net.UnixListener, path string, bound fs.FileInfo) error {
	err := ln.Close()
	if fi, lerr := os.Lstat(path); lerr == nil && os.SameFile(fi, bound) {
		if rerr := os.Remove(path); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}

// ClearStale removes a socket at path that nobody answers on, and
// refuses a socket that answers (an error wrapping k.InUse) and anything
// that is not a socket. Nothing at path is fine.
func (k Kind) ClearStale(path string) error {
	found, err := k.Stale(path)
	if err != nil || !found {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: remove stale %s: %w", k.Name, path, err)
	}
	return nil
}

// Stale reports, without changing anything, whether a socket nobody
// answers on is at path. It is an error wrapping k.InUse if a listener
// answers there, and an error if something that is not a socket is
// there; nothing at path is (false, nil).
func (k Kind) Stale(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", k.Name, err)
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
		return false, fmt.Errorf("%s: %s exists and is not a socket (it is %s); move it away", k.Name, path, what)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return false, fmt.Errorf("%s %s: %w", k.Name, path, k.InUse)
	}
	return true, nil
}
