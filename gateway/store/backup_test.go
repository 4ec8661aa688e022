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

// Writes go on while a backup runs, WAL checkpoints included (the backup
// has a connection of its own), and a symbolic link is never followed.
func TestBackupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenWith(filepath.Join(dir, "state.db"), Options{WALCheckpointSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	for i := range 2000 {
		s.AddDeliveryThen(*sampleDelivery(i), nil, func(Delivery, error) {})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := range 500 {
			if err := s.AddDelivery(ctx, sampleDelivery(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	dst := filepath.Join(dir, "copy.db")
	if _, err := s.Backup(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a write during the backup: %v", err)
	}
	b := openT(t, dst)
	ds, err := b.Deliveries(ctx)
	if err != nil || len(ds) < 2000 || len(ds) > 2500 {
		t.Errorf("the copy holds %d deliveries (%v), want 2000 to 2500", len(ds), err)
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, ".backup-*")); len(entries) != 0 {
		t.Errorf("backup left %v behind", entries)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(filepath.Join(dir, "target.db"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backup(ctx, link); err == nil {
		t.Error("backup through a symbolic link was not refused")
	}
	if _, err := os.Stat(filepath.Join(dir, "target.db")); !os.IsNotExist(err) {
		t.Errorf("the link's target was written (%v)", err)
	}
}
