package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBackupIsAConsistentCopy(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, filepath.Join(dir, "state.db"))
	ctx := context.Background()
	for i := range 50 {
		if err := s.AddDelivery(ctx, sampleDelivery(i)); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(dir, "backup.db")
	n, err := s.Backup(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Size() != n || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file %v (%v), want %d bytes, mode 0600", fi, err, n)
	}
	// The copy opens as a state file and holds what was committed.
	b := openT(t, dst)
	ds, err := b.Deliveries(ctx)
	if err != nil || len(ds) != 50 {
		t.Errorf("the backup holds %d deliveries (%v), want 50", len(ds), err)
	}
	// An existing file is never overwritten.
	if _, err := s.Backup(ctx, dst); !errors.Is(err, os.ErrExist) {
		t.Errorf("backup over an existing file: %v, want it refused", err)
	}
}
