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

	"github.com/bcpgw/bcpgw/internal/unixsock"
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
	return ListenGroup(path, 0)
}

// ListenGroup is Listen for a gateway that serves an operator group as
// well (ServerConfig.OperatorGroup): with gid above 0, the state
// directory is made 0710 with group gid, so that members can reach the
// socket by its name but not list the directory, and the socket 0660
// with group gid. Everything else in the state directory stays the
// gateway user's own: the state file is 0600 and the agents' working
// directories 0700, and any entry already there with a group or other
// bit (a state file restored 0644) loses it before the group is let in.
func ListenGroup(path string, gid int) (*Listener, error) {
	if err := prepareDir(filepath.Dir(path), gid); err != nil {
		return nil, err
	}
	k := sock
	k.Group = gid
	ln, fi, err := k.Listen(path)
	if err != nil {
		return nil, err
	}
	return &Listener{ln: ln, Path: path, file: fi}, nil
}

// sock is the control socket for internal/unixsock: its errors begin
// "control socket", and its private temporary directory has a short name
// (a socket's path is limited to about 104 bytes).
var sock = unixsock.Kind{Name: "control socket", InUse: ErrInUse, TempPrefix: ".c"}

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
		// Only our socket: if another gateway has since put its own at
		// Path, it stays.
		l.err = unixsock.Close(l.ln, l.Path, l.file)
	})
	return l.err
}

// PrepareDir makes sure the state directory dir exists, is a directory
// owned by this user, and is not reachable by group or others (it is
// tightened to 0700 if it is). Call it before creating anything in dir:
// a directory another user made could hold symlinks or planted files.
func PrepareDir(dir string) error { return prepareDir(dir, 0) }

// prepareDir is PrepareDir, leaving the directory traversable (0710) by
// group gid when gid is above 0.
func prepareDir(dir string, gid int) error {
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
	if gid > 0 {
		// The group may reach, by name, whatever in dir lets it: the
		// 0700 directory no longer guards a state file made 0644 by hand
		// or by a restore, its WAL, or a work directory made 0755. So
		// nothing in it keeps a group or other bit first.
		if err := tightenEntries(dir); err != nil {
			return err
		}
		if err := os.Chown(dir, -1, gid); err != nil {
			return fmt.Errorf("state directory: give %s group %d: %w", dir, gid, err)
		}
		if err := os.Chmod(dir, 0o710); err != nil {
			return fmt.Errorf("state directory: make %s 0710: %w", dir, err)
		}
		return nil
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory: tighten %s to 0700: %w", dir, err)
		}
	}
	return nil
}

// tightenEntries takes the group and other bits off every entry of dir
// (not following symbolic links, which have no mode of their own), so
// that a group let through dir reaches nothing in it. The socket of
// another gateway would be reached by name here too, but it answers
// only its own operators, and Listen refuses a live one anyway.
func tightenEntries(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 || fi.Mode().Perm()&0o077 == 0 {
			continue
		}
		if err := os.Chmod(path, fi.Mode().Perm()&^0o077); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("state directory: tighten %s to %v: %w", path, fi.Mode().Perm()&^0o077, err)
		}
	}
	return nil
}

// Check reports, without changing anything, whether Listen could create
// the socket at path: nil if nothing is there or a stale socket is; an
// error wrapping ErrInUse if a gateway answers there; an error if
// something that is not a socket is in the way.
func Check(path string) error {
	_, err := sock.Stale(path)
	return err
}
