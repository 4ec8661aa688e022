package store

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrReadOnly is returned by writes to a store opened with OpenReadOnly.
var ErrReadOnly = errors.New("state file opened read-only")

// OpenReadOnly opens the state file at path for reading only, for a look
// at what a gateway recorded when none runs (bcpgw events, report,
// approvals list and deliveries list after the fact). It changes nothing:
// it creates no file, takes no lock of the state file's (it works whether
// or not a gateway holds it), and migrates nothing: a file of another
// schema version than this bcpgw's is refused, saying what to do. Every
// write returns ErrReadOnly. A missing file is an error wrapping
// fs.ErrNotExist.
//
// SQLite creates the write-ahead log and its index (-wal, -shm) when a
// database in WAL mode is opened, even read-only, unless they exist. So:
//
//   - when they exist (a gateway has the file open, or one crashed), the
//     file is opened read-only through them, the index too (readonly_shm:
//     after a crash, SQLite rebuilds it in memory rather than in the
//     file), and what the log holds is read: after a crash, its last
//     commits are only there;
//   - when there is no log (a gateway that stopped cleanly leaves none:
//     it copies the log into the file and removes it), the file is read
//     as immutable, without a log and without locks. The store's reads
//     are short; a gateway that starts in the middle of one could change
//     pages under it (the read may then fail or be inconsistent, and
//     running the command again reads through the gateway instead);
//   - a log without its index is refused: reading it would create one.
func OpenReadOnly(path string) (*Store, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	f.Close()
	params := "mode=ro&_pragma=busy_timeout(" + itoa(busyTimeoutMS) + ")&_pragma=query_only(ON)"
	wal, walErr := os.Stat(path + "-wal")
	_, shmErr := os.Stat(path + "-shm")
	switch {
	case walErr == nil && shmErr == nil:
		params += "&readonly_shm=1"
	case errors.Is(walErr, fs.ErrNotExist) || (walErr == nil && wal.Size() == 0 && errors.Is(shmErr, fs.ErrNotExist)):
		params += "&immutable=1"
	case walErr != nil:
		return nil, fmt.Errorf("open state: %w", walErr)
	case errors.Is(shmErr, fs.ErrNotExist):
		return nil, fmt.Errorf("state %s: its write-ahead log (%s-wal) has no index (-shm), which reading it would create: run bcpgw run on this state directory once to recover it", path, filepath.Base(path))
	default:
		return nil, fmt.Errorf("open state: %w", shmErr)
	}
	rdb, err := sql.Open("sqlite", "file:"+uriPath(path)+"?"+params)
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(4)
	if err := checkVersion(rdb); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	done := make(chan struct{})
	close(done) // no writer
	return &Store{path: path, rdb: rdb, readOnly: true, done: done, changed: make(chan struct{})}, nil
}

// checkVersion refuses a schema other than the one this bcpgw's
// migrations make: a read-only store cannot migrate it.
func checkVersion(db *sql.DB) error {
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	known, err := knownVersion()
	if err != nil {
		return err
	}
	switch {
	case version > known:
		return fmt.Errorf("schema version %d is newer than this bcpgw knows (%d): use a newer bcpgw", version, known)
	case version < known:
		return fmt.Errorf("schema version %d is older than this bcpgw's (%d): run bcpgw run on this state directory once to migrate it (reading does not change the file)", version, known)
	}
	return nil
}

// knownVersion is the schema version the embedded migrations make: the
// number of the last one.
func knownVersion() (int, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return 0, err
	}
	latest := 0
	for _, name := range names {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(name), "_", 2)[0])
		if err != nil {
			return 0, fmt.Errorf("migration %s: name must start with its number", name)
		}
		latest = max(latest, n)
	}
	return latest, nil
}
