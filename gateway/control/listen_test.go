package control

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// listen calls Listen and closes the listener when the test ends.
func listen(t *testing.T, path string) *Listener {
	t.Helper()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen(%s): %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode()
}

// makeStaleSocket leaves a socket file at path that nobody listens on,
// as a gateway that crashed does.
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
	if got := mode(t, path); got.Type() != fs.ModeSocket {
		t.Fatalf("stale socket %s: mode %v, want a socket", path, got)
	}
}

func TestListenModes(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // dir does not exist yet
	}{
		{"missing dir is created", func(t *testing.T, dir string) {}},
		{"0755 dir is tightened", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
				t.Fatal(err)
			}
		}},
		{"0777 dir is tightened", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"0700 dir is kept", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(shortTempDir(t), "state")
			tt.setup(t, dir)
			path := filepath.Join(dir, SocketName)
			l := listen(t, path)
			if l.Path != path {
				t.Errorf("Listener.Path = %q, want %q", l.Path, path)
			}
			if got := mode(t, path); got.Type() != fs.ModeSocket || got.Perm() != 0o600 {
				t.Errorf("socket mode = %v, want a 0600 socket", got)
			}
			if got := mode(t, dir); !got.IsDir() || got.Perm() != 0o700 {
				t.Errorf("dir mode = %v, want a 0700 directory", got)
			}
			// The private temporary directory is gone.
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != SocketName {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("dir holds %v, want only %s", names, SocketName)
			}
			// It is a working listener at path.
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("dial the new socket: %v", err)
			}
			c.Close()
		})
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "state", SocketName)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	makeStaleSocket(t, path)
	if _, err := net.Dial("unix", path); err == nil {
		t.Fatal("the stale socket answers; the test setup is wrong")
	}

	ts := startServerAt(t, path, newFakeBackend(), ServerConfig{Version: "v-test"})
	st, err := dial(t, path).Status(callCtx(t))
	if err != nil {
		t.Fatalf("status on the replacement socket: %v", err)
	}
	if st.Socket != path || st.Version != "v-test" {
		t.Errorf("status = socket %q version %q, want %q %q", st.Socket, st.Version, path, "v-test")
	}
	if got := mode(t, ts.path); got.Type() != fs.ModeSocket || got.Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a 0600 socket", got)
	}
}

func TestListenRefusesNonSocket(t *testing.T) {
	tests := []struct {
		name  string
		make  func(t *testing.T, path string)
		check func(t *testing.T, path string) // it is left alone
	}{
		{"regular file",
			func(t *testing.T, path string) {
				if err := os.WriteFile(path, []byte("precious"), 0o640); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, path string) {
				b, err := os.ReadFile(path)
				if err != nil || string(b) != "precious" {
					t.Errorf("file now holds %q (err %v), want %q", b, err, "precious")
				}
				if got := mode(t, path); !got.IsRegular() || got.Perm() != 0o640 {
					t.Errorf("file mode = %v, want a 0640 regular file", got)
				}
			}},
		{"directory",
			func(t *testing.T, path string) {
				if err := os.Mkdir(path, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(path, "inside"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, path string) {
				if _, err := os.Stat(filepath.Join(path, "inside")); err != nil {
					t.Errorf("directory content: %v", err)
				}
			}},
		{"symlink to a stale socket",
			func(t *testing.T, path string) {
				target := path + ".target"
				makeStaleSocket(t, target)
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, path string) {
				if got := mode(t, path); got.Type() != fs.ModeSymlink {
					t.Errorf("mode = %v, want the symlink left in place", got)
				}
				if got := mode(t, path+".target"); got.Type() != fs.ModeSocket {
					t.Errorf("symlink target mode = %v, want the socket left in place", got)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(shortTempDir(t), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, SocketName)
			tt.make(t, path)
			l, err := Listen(path)
			if err == nil {
				l.Close()
				t.Fatal("Listen succeeded over something that is not a socket")
			}
			if !strings.Contains(err.Error(), "not a socket") {
				t.Errorf("Listen error = %v, want it to say the path is not a socket", err)
			}
			if errors.Is(err, ErrInUse) {
				t.Errorf("Listen error = %v, should not be ErrInUse", err)
			}
			tt.check(t, path)
		})
	}
}

func TestListenInUse(t *testing.T) {
	ts := startServer(t, newFakeBackend(), ServerConfig{})
	cl := dial(t, ts.path)

	l, err := Listen(ts.path)
	if err == nil {
		l.Close()
		t.Fatal("a second Listen on a served socket succeeded")
	}
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Listen: %v, want an error wrapping ErrInUse", err)
	}
	// The first server is untouched: its socket is in place and answers.
	if got := mode(t, ts.path); got.Type() != fs.ModeSocket {
		t.Fatalf("socket mode after the refused Listen = %v", got)
	}
	if _, err := cl.Status(callCtx(t)); err != nil {
		t.Fatalf("status on the existing connection: %v", err)
	}
	if _, err := dial(t, ts.path).Status(callCtx(t)); err != nil {
		t.Fatalf("status on a new connection: %v", err)
	}
}

func TestListenerClose(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "state", SocketName)
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Close, Lstat(socket) = %v, want not-exist", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Nothing answers any more, and a new Listen takes the path.
	if _, err := Dial(context.Background(), path); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Dial after Close: %v, want ErrNotRunning", err)
	}
	listen(t, path)
}

// Close removes only its own socket: one that another gateway has since
// put at the path stays.
func TestListenerCloseKeepsForeignSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "state", SocketName)
	old, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	// Someone removed our socket, and a new gateway took the path.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ts := startServerAt(t, path, newFakeBackend(), ServerConfig{})
	if err := old.Close(); err != nil {
		t.Fatalf("Close of the old listener: %v", err)
	}
	if got := mode(t, path); got.Type() != fs.ModeSocket {
		t.Fatalf("after the old listener's Close, %s is %v, want the new socket", path, got)
	}
	if _, err := dial(t, ts.path).Status(callCtx(t)); err != nil {
		t.Fatalf("the new gateway after the old listener closed: %v", err)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		make    func(t *testing.T, path string)
		wantErr bool
		inUse   bool
	}{
		{"nothing", func(t *testing.T, path string) {}, false, false},
		{"stale socket", makeStaleSocket, false, false},
		{"live socket", func(t *testing.T, path string) { listen(t, path) }, true, true},
		{"regular file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(shortTempDir(t), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, SocketName)
			tt.make(t, path)
			before, beforeErr := os.Lstat(path)

			err := Check(path)
			if (err != nil) != tt.wantErr || errors.Is(err, ErrInUse) != tt.inUse {
				t.Fatalf("Check = %v, want error %t (ErrInUse %t)", err, tt.wantErr, tt.inUse)
			}
			// Check changes nothing.
			after, afterErr := os.Lstat(path)
			if (beforeErr == nil) != (afterErr == nil) || (beforeErr == nil && !os.SameFile(before, after)) {
				t.Errorf("Check changed %s: before %v/%v, after %v/%v", path, before, beforeErr, after, afterErr)
			}
		})
	}
}

// A state directory made by another user may hold symlinks or planted
// files: it is refused before anything is created in it.
func TestPrepareDirRefusesAnotherUsersDirectory(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make a directory owned by another uid")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := PrepareDir(dir)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("PrepareDir on uid 65534's directory: err = %v", err)
	}
	if _, err := Listen(filepath.Join(dir, SocketName)); err == nil {
		t.Fatal("Listen in another user's directory succeeded")
	}
}
