package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Backup writes a consistent copy of the state file to dst while the
// gateway runs: one snapshot, compacted, without its WAL (VACUUM INTO).
// dst must not exist; it is created with mode 0600, like the state file
// (it holds everything the state file does). It returns the copy's size.
//
// The snapshot is taken on a connection of its own, so that neither the
// writer nor the checkpoints wait for it (the WAL grows meanwhile, as for
// any long reader), and it is written first to a private file beside the
// state file, then copied into dst through the descriptor that created
// it: SQLite opens files by name, and a name in a directory others can
// write could be swapped for a symbolic link between the two opens.
func (s *Store) Backup(ctx context.Context, dst string) (int64, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	n, err := s.backupTo(ctx, out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, errors.Join(fmt.Errorf("backup to %s: %w", dst, err), os.Remove(dst))
	}
	return n, nil
}

func (s *Store) backupTo(ctx context.Context, out *os.File) (int64, error) {
	tmpDir, err := os.MkdirTemp(filepath.Dir(s.path), ".backup-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmpDir)
	snapshot := filepath.Join(tmpDir, "copy.db")
	db, err := sql.Open("sqlite", "file:"+uriPath(s.path)+"?_pragma=busy_timeout("+itoa(busyTimeoutMS)+")&mode=ro")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, snapshot); err != nil {
		return 0, err
	}
	in, err := os.Open(snapshot)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	n, err := io.Copy(out, in)
	if err != nil {
		return 0, err
	}
	return n, out.Sync()
}
