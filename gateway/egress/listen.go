package egress

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// listenUnix binds a unix socket at path that is never reachable by
// another user, not even between bind and chmod: it is bound in a fresh
// 0700 directory next to path, made 0600 there, and renamed into place
// (the approach of the control socket, gateway/control).
func listenUnix(path string) (*net.UnixListener, fs.FileInfo, error) {
	if err := clearStale(path); err != nil {
		return nil, nil, err
	}
	// A short name: a socket's path is limited to about 104 bytes, and
	// the temporary one is a few bytes longer than path.
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".e")
	if err != nil {
		return nil, nil, fmt.Errorf("socket: %w", err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("socket: %w", err)
	}
	// The socket lives at path once renamed; closeUnix removes it there.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(bound, 0o600); err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("socket: %w", err)
	}
	fi, err := os.Lstat(bound)
	if err == nil {
		err = os.Rename(bound, path)
	}
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("socket: %w", err)
	}
	return ln, fi, nil
}

// closeUnix closes ln and removes its socket file, only if path is still
// that socket (a new proxy may have put its own there since).
func closeUnix(ln *net.UnixListener, path string, bound fs.FileInfo) error {
	err := ln.Close()
	if fi, lerr := os.Lstat(path); lerr == nil && os.SameFile(fi, bound) {
		if rerr := os.Remove(path); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("egress: close %s: %w", path, err)
	}
	return nil
}

// clearStale removes a socket at path that nobody answers on, and
// refuses a socket that answers and anything that is not a socket.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket: %w", err)
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
		return fmt.Errorf("socket: %s exists and is not a socket (it is %s); move it away", path, what)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: %w", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("socket: remove stale %s: %w", path, err)
	}
	return nil
}
