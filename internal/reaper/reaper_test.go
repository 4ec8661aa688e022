//go:build linux

package reaper

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// hangGuard bounds every wait, so a bug fails the test instead of
// hanging it; what it guards takes milliseconds.
const hangGuard = 15 * time.Second

// testReaper makes this process a subreaper and returns a Reaper that
// looks every few milliseconds (so the tests need not wait for a
// SIGCHLD to be sure a look happened), not yet running.
func testReaper(t *testing.T) *Reaper {
	t.Helper()
	r, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.tick = 5 * time.Millisecond
	return r
}

// runReaper runs r.Run until the test ends, and checks that it returns.
func runReaper(t *testing.T, r *Reaper) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(hangGuard):
			t.Error("Run did not return after its context ended")
		}
	})
}

// procState returns pid's state and parent, or ok false once it is gone
// (reaped).
func procState(t *testing.T, pid int) (state byte, ppid int, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	state, ppid, ok = parseStat(b)
	if !ok {
		t.Fatalf("cannot parse /proc/%d/stat: %q", pid, b)
	}
	return state, ppid, true
}

// A runtime's daemon, orphaned by the double fork, becomes this
// process's child (not init's) and is reaped when it exits.
func TestReapsOrphanedDaemon(t *testing.T) {
	r := testReaper(t)

	// sh starts a subshell that starts the daemon and exits; then sh
	// exits too. The daemon's stdio is not the pipe, or Output would
	// wait for it.
	cmd := exec.Command("sh", "-c", `(sleep 300 </dev/null >/dev/null 2>&1 & echo $!); exit 0`)
	var out strings.Builder
	cmd.Stdout = &out
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sh: %v", err)
	}
	r.Release(cmd.Process.Pid)
	daemon, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("sh printed %q, want the daemon's pid", out.String())
	}
	killed := false
	t.Cleanup(func() {
		if !killed { // a failure before the kill below: do not leave it running
			_ = syscall.Kill(daemon, syscall.SIGKILL)
		}
	})

	testproc.Eventually(t, "the daemon to be adopted", func() bool {
		_, ppid, ok := procState(t, daemon)
		if !ok {
			t.Fatalf("the daemon %d is gone before it was killed", daemon)
		}
		return ppid == os.Getpid()
	})

	// Dead and not reaped: a zombie, for as long as nobody reaps it.
	if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = true
	testproc.Eventually(t, "the daemon to be a zombie", func() bool {
		state, _, ok := procState(t, daemon)
		return ok && state == 'Z'
	})
	time.Sleep(20 * time.Millisecond)
	if state, _, ok := procState(t, daemon); !ok || state != 'Z' {
		t.Fatalf("daemon state %q (present %t) before Run, want still a zombie", state, ok)
	}

	runReaper(t, r)
	testproc.Eventually(t, "the daemon to be reaped", func() bool {
		_, _, ok := procState(t, daemon)
		return !ok
	})
}

// While Run is active, an owned child's cmd.Wait still gets its exit
// status: half the time after the reaper has looked at it as a zombie,
// half the time racing it.
func TestOwnedChildKeepsItsExitStatus(t *testing.T) {
	r := testReaper(t)
	runReaper(t, r)
	n := 200
	if testing.Short() {
		n = 40
	}
	for i := range n {
		code := i%250 + 1
		cmd := exec.Command("sh", "-c", "exit "+strconv.Itoa(code))
		if err := r.Start(cmd); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if i%2 == 0 {
			testproc.Eventually(t, "the child to be a zombie", func() bool {
				state, _, ok := procState(t, pid)
				return ok && state == 'Z'
			})
			// Two looks completed after it became a zombie: at least
			// one looked at it whole.
			seen := r.scans.Load()
			testproc.Eventually(t, "the reaper to look", func() bool { return r.scans.Load() >= seen+2 })
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != code {
			t.Fatalf("run %d: cmd.Wait = %v, want exit status %d", i, err, code)
		}
		r.Release(pid)
	}
}

// Run starts no goroutine of its own that outlives it.
func TestRunLeavesNoGoroutine(t *testing.T) {
	r := testReaper(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	testproc.Eventually(t, "Run to look", func() bool { return r.scans.Load() >= 2 })
	cancel()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal("Run did not return after its context ended")
	}
	testproc.Eventually(t, "no goroutine in the reaper", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "reaper.(*Reaper)")
	})
}

// A nil Reaper starts commands, releases nothing, and runs until its
// context ends.
func TestNilReaper(t *testing.T) {
	var r *Reaper
	cmd := exec.Command("sh", "-c", "exit 3")
	if err := r.Start(cmd); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("cmd.Wait = %v, want exit status 3", err)
	}
	r.Release(cmd.Process.Pid)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r.Run(ctx)
	if ctx.Err() == nil {
		t.Error("Run on a nil Reaper returned before its context ended")
	}
}

// A failed Start records nothing.
func TestStartFailure(t *testing.T) {
	r := testReaper(t)
	err := r.Start(exec.Command(filepath.Join(t.TempDir(), "missing")))
	if err == nil {
		t.Fatal("Start of a missing program succeeded")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.owned) != 0 {
		t.Errorf("owned = %v after a failed start, want none", r.owned)
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		line  string
		state byte
		ppid  int
		ok    bool
	}{
		{"42 (sleep) Z 7 42 42 0 -1", 'Z', 7, true},
		{"42 (a) Z 9 (b) S 1 2) R 13 4", 'R', 13, true},
		{"42 (sh) S", 0, 0, false},
		{"42 sh S 1", 0, 0, false},
		{"42 (sh) S x", 0, 0, false},
	}
	for _, tt := range tests {
		state, ppid, ok := parseStat([]byte(tt.line))
		if state != tt.state || ppid != tt.ppid || ok != tt.ok {
			t.Errorf("parseStat(%q) = %q, %d, %t; want %q, %d, %t", tt.line, state, ppid, ok, tt.state, tt.ppid, tt.ok)
		}
	}
}
