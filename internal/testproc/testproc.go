// Package testproc holds what the tests that run real subprocesses share:
// building the binaries they run, and a buffer a subprocess (or a logger)
// writes while the test reads it. It is imported by tests only.
package testproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync"
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
