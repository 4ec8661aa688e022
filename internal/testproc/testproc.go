// Package testproc holds what the tests that run real subprocesses share:
// their TestMain (Main), building the binaries they run, a buffer a
// subprocess (or a logger) writes while the test reads it, waiting for
// what happens in the background, and the fake clock they start from.
// It is imported by tests only.
package testproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/sandbox"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/fakert"
)

// Build runs go build for each output path and package (relative to the
// calling test's directory), sending the compiler's output to stderr.
func Build(binaries map[string]string) error {
	for out, pkg := range binaries {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", pkg, err)
		}
	}
	return nil
}

// Buffer is a bytes.Buffer safe for concurrent writes and reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// CheckFor calls fn every step until it returns true or total has
// passed, and returns its last answer: how tests wait for what happens in
// the background without asserting how long it takes.
func CheckFor(total, step time.Duration, fn func() bool) bool {
	deadline := time.Now().Add(total)
	for time.Now().Before(deadline) {
		if fn() {
			return true
		}
		time.Sleep(step)
	}
	return fn()
}

// AdvanceUntil moves clk forward by step at each poll until cond holds
// or total has passed: what waits on the fake clock (stop phases,
// backoffs, retries) then happens in order, at whatever speed the machine
// runs.
func AdvanceUntil(clk *clock.Fake, step, total time.Duration, cond func() bool) bool {
	return CheckFor(total, 10*time.Millisecond, func() bool {
		if cond() {
			return true
		}
		clk.Advance(step)
		return false
	})
}

// FakeClock is the fake clock the tests start from: a fixed date, so that
// what a test prints and stores does not depend on the day it runs.
func FakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
}

// StopGroup SIGSTOPs the process group of pid (a sandbox's helper and the
// runtime in it), as a debugger or a deadlock would leave it, and
// continues it when the test ends in case nothing killed it.
func StopGroup(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the runtime: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGCONT) })
}

// Main is the TestMain of a package whose tests start runtimes. A test
// binary started as a fake runtime (fakert.Env set) plays it and exits;
// one started as the sandbox's helper (the test binary re-executes
// itself to build a sandbox) does that. Otherwise Main builds pkgs into a
// temporary directory, tells built where it is, runs the tests and exits
// with their code.
func Main(m *testing.M, built func(dir string), pkgs ...string) {
	sandbox.Init()
	if mode := os.Getenv(fakert.Env); mode != "" {
		os.Exit(fakert.Run(mode))
	}
	dir, err := os.MkdirTemp("", "bcpgw-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(pkgs) > 0 {
		build := exec.Command("go", append([]string{"build", "-o", dir}, pkgs...)...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build test programs:", err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	built(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Wait bounds how long a test waits for something that happens in the
// background before it fails; Poll is how often it looks. Generous: the
// machines that run the tests are shared and slow, and a passing test
// never waits that long.
const (
	Wait = 30 * time.Second
	Poll = 10 * time.Millisecond
)

// Context returns a context that ends after Wait or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond until it holds, and fails the test if it does not
// within Wait.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !CheckFor(Wait, 2*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}
