package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Backup writes a consistent copy of the state file to dst while the
// gateway runs: one snapshot (VACUUM INTO, on the checkpointer's
// connection, so writes go on meanwhile), compacted, without its WAL. dst
// must not exist; it is created with mode 0600, like the state file (it
// holds everything the state file does). A failed backup removes what it
// wrote.
func (s *Store) Backup(ctx context.Context, dst string) (int64, error) {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	f.Close()
	// An empty file is what VACUUM INTO accepts besides a missing one.
	if _, err := s.cdb.ExecContext(ctx, `VACUUM INTO ?`, dst); err != nil {
		return 0, errors.Join(fmt.Errorf("backup to %s: %w", dst, err), os.Remove(dst))
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	return fi.Size(), nil
}
