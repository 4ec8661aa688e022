package unixsock

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var errTestInUse = errors.New("test: in use")

var kind = Kind{Name: "test socket", InUse: errTestInUse, TempPrefix: ".t"}

// shortDir is a fresh directory with a short path: a socket's path is
// limited to about 104 bytes, which t.TempDir's can exceed.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "us")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// listen calls kind.Listen and closes the listener when the test ends.
func listen(t *testing.T, path string) (*net.UnixListener, fs.FileInfo) {
	t.Helper()
	ln, fi, err := kind.Listen(path)
	if err != nil {
		t.Fatalf("Listen(%s): %v", path, err)
	}
	t.Cleanup(func() { Close(ln, path, fi) })
	return ln, fi
}

func lstat(t *testing.T, path string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// makeStaleSocket leaves a socket file at path that nobody listens on,
// as a process that crashed does.
func makeStaleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if fi := lstat(t, path); fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket %s: mode %v, want a socket", path, fi.Mode())
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// The socket is bound inside a fresh 0700 directory of ours next to
// path, so no other user can reach it before it is 0600; only then is it
// renamed to path. The umask plays no part: with umask 0 bind makes a
// socket anyone could connect to, were it not in the private directory.
func TestListenBindsInPrivateDir(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "s.sock")

	old := syscall.Umask(0)
	defer syscall.Umask(old)
	var hooked bool
	testHookBound = func(bound string) {
		hooked = true
		tmp := filepath.Dir(bound)
		if filepath.Dir(tmp) != dir || !strings.HasPrefix(filepath.Base(tmp), kind.TempPrefix) {
			t.Errorf("bound at %s, want it in a %s* directory in %s", bound, kind.TempPrefix, dir)
		}
		fi, err := os.Lstat(tmp)
		if err != nil {
			t.Fatalf("the private directory: %v", err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("private directory %s: mode %v, want a 0700 directory", tmp, fi.Mode())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
			t.Errorf("private directory %s belongs to uid %d, want %d", tmp, st.Uid, os.Getuid())
		}
		if fi, err := os.Lstat(bound); err != nil || fi.Mode().Type() != fs.ModeSocket {
			t.Errorf("bound %s: %v, %v; want a socket", bound, fi, err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists before the socket is 0600: %v", path, err)
		}
	}
	defer func() { testHookBound = nil }()

	listen(t, path)
	syscall.Umask(old)
	if !hooked {
		t.Fatal("the socket was not bound through Listen's bind")
	}
	if fi := lstat(t, path); fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a 0600 socket", fi.Mode())
	}
	if got := names(t, dir); len(got) != 1 || got[0] != "s.sock" {
		t.Errorf("dir holds %v, want only s.sock (the private directory removed)", got)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the new socket: %v", err)
	}
	c.Close()
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	makeStaleSocket(t, path)
	staleFI := lstat(t, path)

	_, fi := listen(t, path)
	now := lstat(t, path)
	if os.SameFile(now, staleFI) || !os.SameFile(now, fi) {
		t.Error("the stale socket is still at path, not the new one")
	}
	if now.Mode().Type() != fs.ModeSocket || now.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a 0600 socket", now.Mode())
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the replacement: %v", err)
	}
	c.Close()
}

func TestListenRefusesLiveSocket(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "s.sock")
	_, first := listen(t, path)

	ln, _, err := kind.Listen(path)
	if err == nil {
		ln.Close()
		t.Fatal("a second Listen on a live socket succeeded")
	}
	if !errors.Is(err, errTestInUse) {
		t.Errorf("second Listen: %v, want an error wrapping Kind.InUse", err)
	}
	if want := "test socket " + path + ": "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("second Listen: %q, want it to begin %q", err, want)
	}
	// The first listener is untouched and nothing is left behind.
	if !os.SameFile(lstat(t, path), first) {
		t.Error("the live socket was replaced")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the first listener: %v", err)
	}
	c.Close()
	if got := names(t, dir); len(got) != 1 {
		t.Errorf("dir holds %v, want only s.sock", got)
	}
}

func TestListenRefusesNonSocket(t *testing.T) {
	tests := []struct {
		name  string
		what  string
		make  func(t *testing.T, path string)
		check func(t *testing.T, path string) // it is left alone
	}{
		{"regular file", "a regular file",
			func(t *testing.T, path string) {
				if err := os.WriteFile(path, []byte("precious"), 0o640); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, 0o640); err != nil { // whatever the umask
					t.Fatal(err)
				}
			},
			func(t *testing.T, path string) {
				b, err := os.ReadFile(path)
				if err != nil || string(b) != "precious" {
					t.Errorf("file now holds %q (err %v), want %q", b, err, "precious")
				}
				if fi := lstat(t, path); !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
					t.Errorf("file mode = %v, want a 0640 regular file", fi.Mode())
				}
			}},
		{"directory", "a directory",
			func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, path string) {
				if fi := lstat(t, path); !fi.IsDir() {
					t.Errorf("mode = %v, want the directory left in place", fi.Mode())
				}
			}},
		{"symlink to a stale socket", "a symbolic link",
			func(t *testing.T, path string) {
				makeStaleSocket(t, path+".target")
				if err := os.Symlink(path+".target", path); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, path string) {
				if fi := lstat(t, path); fi.Mode().Type() != fs.ModeSymlink {
					t.Errorf("mode = %v, want the symlink left in place", fi.Mode())
				}
				if fi := lstat(t, path+".target"); fi.Mode().Type() != fs.ModeSocket {
					t.Errorf("target mode = %v, want the socket left in place", fi.Mode())
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortDir(t)
			path := filepath.Join(dir, "s.sock")
			tt.make(t, path)
			before := names(t, dir)

			ln, _, err := kind.Listen(path)
			if err == nil {
				ln.Close()
				t.Fatal("Listen succeeded over something that is not a socket")
			}
			want := "test socket: " + path + " exists and is not a socket (it is " + tt.what + "); move it away"
			if err.Error() != want {
				t.Errorf("Listen error = %q, want %q", err, want)
			}
			if errors.Is(err, errTestInUse) {
				t.Errorf("Listen error = %v, should not wrap Kind.InUse", err)
			}
			tt.check(t, path)
			if got := names(t, dir); strings.Join(got, " ") != strings.Join(before, " ") {
				t.Errorf("dir holds %v, had %v", got, before)
			}
		})
	}
}

func TestListenMissingDir(t *testing.T) {
	path := filepath.Join(shortDir(t), "missing", "s.sock")
	ln, _, err := kind.Listen(path)
	if err == nil {
		ln.Close()
		t.Fatal("Listen in a missing directory succeeded")
	}
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "test socket: ") {
		t.Errorf("Listen error = %v, want a not-exist error beginning %q", err, "test socket: ")
	}
}

// Stale judges what is at path and changes nothing.
func TestStale(t *testing.T) {
	tests := []struct {
		name      string
		make      func(t *testing.T, path string)
		wantStale bool
		wantErr   bool
		inUse     bool
	}{
		{"nothing", func(t *testing.T, path string) {}, false, false, false},
		{"stale socket", makeStaleSocket, true, false, false},
		{"live socket", func(t *testing.T, path string) { listen(t, path) }, false, true, true},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(shortDir(t), "s.sock")
			tt.make(t, path)
			before, beforeErr := os.Lstat(path)

			found, err := kind.Stale(path)
			if found != tt.wantStale || (err != nil) != tt.wantErr || errors.Is(err, errTestInUse) != tt.inUse {
				t.Fatalf("Stale = %t, %v; want %t, error %t (in use %t)", found, err, tt.wantStale, tt.wantErr, tt.inUse)
			}
			after, afterErr := os.Lstat(path)
			if (beforeErr == nil) != (afterErr == nil) || (beforeErr == nil && !os.SameFile(before, after)) {
				t.Errorf("Stale changed %s: before %v/%v, after %v/%v", path, before, beforeErr, after, afterErr)
			}
		})
	}
}

// Close removes its own socket, and only that: one another listener has
// since put at the path stays.
func TestClose(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	ln, fi, err := kind.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Close(ln, path, fi); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Close, Lstat = %v, want not-exist", err)
	}

	old, oldFI, err := kind.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, newFI := listen(t, path)
	if err := Close(old, path, oldFI); err != nil {
		t.Fatalf("Close of the old listener: %v", err)
	}
	if !os.SameFile(lstat(t, path), newFI) {
		t.Fatal("the old listener's Close removed the new socket")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial the new listener: %v", err)
	}
	c.Close()
}
