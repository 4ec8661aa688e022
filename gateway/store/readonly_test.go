package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dirFiles lists the files in dir with their sizes, modification times
// and hashes, to see that a read-only open changes nothing.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %d %d %x", e.Name(), fi.Size(), fi.ModTime().UnixNano(), sha256.Sum256(b)))
	}
	return out
}

// readBack opens path read-only, checks that it holds the n events and
// the approval item written by fillStore, that writes are refused, and
// that nothing was created or changed in its directory (when live, a
// store has the file open: only that nothing was created).
func readBack(t *testing.T, path string, n int, item string, live bool) {
	t.Helper()
	dir := filepath.Dir(path)
	files := func() []string {
		fs := dirFiles(t, dir)
		for i := range fs {
			if live {
				fs[i], _, _ = strings.Cut(fs[i], " ")
			}
		}
		return fs
	}
	before := files()
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatalf("OpenReadOnly: %v", err)
	}
	ctx := context.Background()
	evs, err := ro.QueryEvents(ctx, EventQuery{Limit: 1000})
	if err != nil || len(evs) != n {
		t.Errorf("events: %d (%v), want %d", len(evs), err, n)
	}
	if a, err := ro.Approval(ctx, item); err != nil || a.Status != ApprovalPending {
		t.Errorf("approval %s: %+v, %v", item, a, err)
	}
	if err := ro.AppendSync(ctx, Event{Time: t0, Kind: "x"}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("a write to a read-only store: %v, want ErrReadOnly", err)
	}
	ro.Append(Event{Time: t0, Kind: "x"}) // dropped, and does not block
	if err := ro.Flush(ctx); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Flush: %v, want ErrReadOnly", err)
	}
	if err := ro.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if after := files(); !slices.Equal(before, after) {
		t.Errorf("the read-only open changed the directory: %v, then %v", before, after)
	}
}

// fillStore writes n events and one pending item, and returns its id.
func fillStore(t *testing.T, s *Store, n int) string {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if err := s.AppendSync(ctx, Event{Time: t0, Kind: "publish_accepted", Agent: "researcher", Detail: strings.Repeat("x", i)}); err != nil {
			t.Fatal(err)
		}
	}
	a := Approval{Controller: "main", Reader: "researcher", SubscriptionID: "digest", Category: 3,
		Response: []byte(`{"summary":"s"}`), SHA256: ContentHash([]byte(`{"summary":"s"}`)), CreatedAt: t0, ExpiresAt: t0.Add(1e12)}
	if err := s.AddApproval(ctx, &a); err != nil {
		t.Fatal(err)
	}
	return a.ID
}

// A state file closed cleanly (no write-ahead log left) is read as it is,
// creating nothing, while its lock is free.
func TestOpenReadOnlyAfterCleanClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bcpgw.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	id := fillStore(t, s, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a clean close left the write-ahead log (%v): this test reads without one", err)
	}
	readBack(t, path, 5, id, false)
	// The writer's lock is free: a gateway can open the file afterwards.
	s, err = Open(path)
	if err != nil {
		t.Fatalf("Open after a read-only open: %v", err)
	}
	s.Close()
}

// While a gateway has the file open (its lock held), and after it
// crashed (its write-ahead log and index left behind, with commits only
// there), the read sees every commit and creates nothing.
func TestOpenReadOnlyLiveAndAfterCrash(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bcpgw.db")
	s := openT(t, path)
	id := fillStore(t, s, 7)
	readBack(t, path, 7, id, true)

	// A crash: the files as the writer left them, copied while it is
	// still open (nothing writes meanwhile).
	crashed := filepath.Join(t.TempDir(), "bcpgw.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+suffix, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(crashed + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the write-ahead log is empty (%v): the writer truncates it only past its limit", err)
	}
	readBack(t, crashed, 7, id, false)

	// A log without its index would need one created: refused.
	if err := os.Remove(crashed + "-shm"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(crashed); err == nil || !strings.Contains(err.Error(), "bcpgw run") {
		t.Errorf("a log without its index: %v, want a refusal saying to run bcpgw run", err)
	}
	if _, err := os.Stat(crashed + "-shm"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refusal created the index")
	}
}

// A schema of another version is refused, not migrated; a missing file
// is not created.
func TestOpenReadOnlyRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenReadOnly(filepath.Join(dir, "none.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	if files := dirFiles(t, dir); len(files) != 0 {
		t.Errorf("opening a missing file created %v", files)
	}
	known, err := knownVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version int
		want    string
	}{
		{known + 1, "newer than this bcpgw knows"},
		{known - 1, "run bcpgw run on this state directory once to migrate it"},
	} {
		path := filepath.Join(t.TempDir(), "bcpgw.db")
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("PRAGMA user_version = " + itoa(tc.version)); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := OpenReadOnly(path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("schema version %d (this bcpgw's is %d): %v, want %q", tc.version, known, err, tc.want)
		}
		var v int
		db, _ = sql.Open("sqlite", path)
		_ = db.QueryRow("PRAGMA user_version").Scan(&v)
		db.Close()
		if v != tc.version {
			t.Errorf("the read-only open changed the schema version from %d to %d", tc.version, v)
		}
	}
}
