package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// bcpgw backup copies the running gateway's state file: the copy opens
// as a state file and holds what was delivered; an existing file is
// never overwritten.
func TestBackupOfARunningGateway(t *testing.T) {
	dir := t.TempDir()
	agentsDir := hangSet(t, dir, "0s", 0)
	state := filepath.Join(dir, "state")
	var log testproc.Buffer
	gw := startGateway(t, agentsDir, state, `[{"subscription_id": "items", "controller": "main", "response": {"item": "item {i}"}, "repeat": 5}]`, &log)
	defer func() {
		gw.Process.Signal(syscall.SIGTERM)
		gw.Wait()
	}()
	waitTestrtRecords(t, filepath.Join(dir, "main", "main.log"), "applied", 5, &log)
	dst := filepath.Join(t.TempDir(), "copy.db")
	r := run(t, runOpts{env: opEnv}, "backup", dst, "--state", state)
	if r.code != 0 || !strings.Contains(r.stdout, "Copied the state file to "+dst) {
		t.Fatalf("backup:\n%s\ngateway log:\n%s", r, &log)
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("copy %v (%v), want mode 0600", fi, err)
	}
	st, err := store.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := st.Deliveries(context.Background())
	st.Close()
	if err != nil || len(ds) != 5 {
		t.Errorf("the copy holds %d deliveries (%v), want 5", len(ds), err)
	}
	if r := run(t, runOpts{env: opEnv}, "backup", dst, "--state", state); r.code != exitFailed || !strings.Contains(r.stderr, "exists") {
		t.Errorf("backup over an existing file:\n%s", r)
	}
}
