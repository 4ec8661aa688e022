package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the controlling side (which the
// test reads and never answers from) and the terminal a command gets.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open the terminal: %v", err)
	}
	return m, s
}

// runOnTerminal runs bcpgw with args on a terminal that never answers a
// query (a terminal that does not know OSC 11, or a slow remote one) as
// its controlling terminal, stdin, stdout and stderr, and returns all
// the command wrote and its exit code.
func runOnTerminal(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// A terminal termenv would query (it skips dumb, screen and tmux).
	cmd.Env = append(baseEnv(), "TERM=xterm-256color", "COLORTERM=truecolor")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// Its own session, with the terminal as its controlling one: the
	// command is the terminal's foreground process group, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		tty.Close()
		t.Fatal(err)
	}
	tty.Close()
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		// Until the command's end closes the last descriptor of the
		// terminal (EIO).
		_, _ = io.Copy(&out, ptmx)
	}()
	err := cmd.Wait()
	<-read
	if ctx.Err() != nil {
		t.Fatalf("bcpgw %q did not end: %s", args, out.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("bcpgw %q: %v", args, err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// Plain commands send no terminal queries: on a terminal that never
// answers, none is written (each would stall the command for seconds
// waiting for an answer).
func TestPlainCommandsDoNotQueryTheTerminal(t *testing.T) {
	state := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"validate", examples}, 0, "valid: 2 agents"},
		{[]string{"agents", "--state", state}, exitNotRunning, "the gateway is not running"},
		{[]string{"status", "--state", state}, exitNotRunning, "the gateway is not running"},
		{[]string{"version"}, 0, "bcpgw "},
		{[]string{"--help"}, 0, "Usage:"},
	} {
		out, code := runOnTerminal(t, tc.args...)
		for _, q := range []string{"\x1b]", "\x1b[6n", "\x1b[c", "\x1b[>"} {
			if strings.Contains(out, q) {
				t.Errorf("bcpgw %q queried the terminal (%q):\n%q", tc.args, q, out)
			}
		}
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("bcpgw %q: exit %d (want %d), output (want %q):\n%s", tc.args, code, tc.code, tc.want, out)
		}
	}
}

// bcpgw approvals is the interactive queue: without a terminal it says
// what to use instead, and exits 2.
func TestApprovalsWithoutTerminal(t *testing.T) {
	state := t.TempDir()
	r := run(t, runOpts{}, "approvals", "--state", state)
	if r.code != exitUsage || !strings.Contains(r.stderr, "bcpgw approvals list") || r.stdout != "" {
		t.Errorf("approvals without a terminal:\n%s", r)
	}
	// A terminal on one side only is not enough either.
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	defer tty.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "approvals", "--state", state)
	cmd.Env = append(baseEnv(), "TERM=xterm-256color")
	var stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, nil, &stderr
	if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(stderr.String(), "bcpgw approvals list") {
		t.Errorf("approvals with stdin a terminal, stdout not: %v\n%s", err, stderr.String())
	}
}
