// Package store keeps the gateway's durable state in one SQLite file:
// the delivery outbox, the approval queue and the audit events.
//
// Accepted means durable. A Reader hears success only after the row that
// carries its data is committed, and every commit is made with WAL and
// synchronous=FULL, so it survives a power loss, not only a crash of the
// gateway. One goroutine owns the write connection and commits whatever
// has queued up while the previous commit was syncing in one transaction
// (group commit): under load, many publishes share one fsync, so
// durability costs latency, not throughput. Reads use a separate pool and
// never wait for writes.
//
// What the store keeps is bounded, for a gateway that runs for months: the
// writer checkpoints and truncates the write-ahead log between two
// commits once it passes a limit (DefaultWALCheckpointSize), and Retention
// prunes finished deliveries, decided approval items and old events in
// small commits (retention.go). The exposure report's figures are kept in
// tables of their own, updated with the events they come from, so that
// they outlive those events (exposure.go).
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

//go:embed migrations/*.sql
var migrations embed.FS

// maxBatch bounds how many writes share one transaction.
const maxBatch = 512

// ErrClosed is returned by writes submitted after Close.
var ErrClosed = errors.New("store closed")

// Store is the gateway's state file. Its methods are safe for concurrent
// use.
type Store struct {
	path string
	lock *os.File // held while open: one process per state file
	wdb  *sql.DB  // one connection, owned by the writer goroutine
	rdb  *sql.DB  // readers
	cdb  *sql.DB  // the checkpointer's connection

	stopCheckpoints, checkpointsDone chan struct{}

	mu     sync.RWMutex // held for reading while submitting; Close takes it
	closed bool
	ops    chan op
	done   chan struct{}        // closed when the writer has exited
	stmts  map[string]*sql.Stmt // prepared on wdb at Open; read-only after
	// readOnly: opened with OpenReadOnly, rdb alone (no writer, no lock).
	readOnly bool

	changedMu sync.Mutex
	changed   chan struct{} // closed and replaced after a commit that stored events

	// ckptMu is held while a checkpoint runs: SQLite lets only one run
	// at a time and refuses a second at once, without waiting.
	ckptMu   sync.Mutex
	walLimit int64    // Options.WALCheckpointSize
	wal      walState // owned by the writer goroutine
	walStats struct { // copies of the writer's figures, for WALStats
		highWater, checkpoints, busy, commits atomic.Int64
	}
}

// op is one write. The writer runs fn inside the batch's transaction, so
// that one failing write does not undo the others (see commit), and calls
// done with the outcome once the batch is durable (nil for a write nobody
// waits for). done runs on the writer goroutine: it must not block.
//
// fn may run twice, the first time in a transaction that is rolled back
// (see commit): it must set the Go values it fills in again each time,
// not add to them.
type op struct {
	fn   func(*wtx) error
	done func(error)
}

// wtx is the writer's transaction. Its Exec and Query use the statements
// prepared at Open: parsing SQL was most of the writer's time.
type wtx struct {
	*sql.Tx
	s      *Store
	events bool // the transaction stored events
}

// Exec runs query in the transaction, prepared if it is one of
// writeStatements.
func (t *wtx) Exec(query string, args ...any) (sql.Result, error) {
	if st, ok := t.s.stmts[query]; ok {
		return t.Tx.Stmt(st).Exec(args...)
	}
	return t.Tx.Exec(query, args...)
}

// QueryRow runs query in the transaction, prepared if it is one of
// writeStatements.
func (t *wtx) QueryRow(query string, args ...any) *sql.Row {
	if st, ok := t.s.stmts[query]; ok {
		return t.Tx.Stmt(st).QueryRow(args...)
	}
	return t.Tx.QueryRow(query, args...)
}

// Query runs query in the transaction, prepared if it is one of
// writeStatements.
func (t *wtx) Query(query string, args ...any) (*sql.Rows, error) {
	if st, ok := t.s.stmts[query]; ok {
		return t.Tx.Stmt(st).Query(args...)
	}
	return t.Tx.Query(query, args...)
}

// Options tune a Store. The zero value gives the defaults.
type Options struct {
	// WALCheckpointSize is the size of the write-ahead log past which the
	// writer, between two batches, checkpoints it and truncates it to
	// zero. Default DefaultWALCheckpointSize. The WAL file then stays
	// under this size plus one batch (see DefaultWALCheckpointSize).
	WALCheckpointSize int64
}

// DefaultWALCheckpointSize is the default Options.WALCheckpointSize.
//
// SQLite appends every commit to the WAL and can start it over only once
// all of it has been copied into the database file while no commit came
// in between, which never happens under steady load: left to the
// checkpoints of a separate connection, the WAL grew by about 12 MB/s at
// 1,000 pushes/s, without limit. So the writer, which knows when it is
// between commits, checkpoints the WAL itself (TRUNCATE) as soon as the
// file passes this size after a commit. Most pages have been copied by
// then by the background checkpoints, so this costs the writer little;
// pushes that arrive meanwhile queue and share the next commit. The WAL
// file is then at most this size plus what one batch (maxBatch writes)
// adds, and journal_size_limit truncates it back to this size whenever
// SQLite restarts it on its own. The bound is soft in one case: a reader
// holding a read transaction open pins the WAL until it ends (the
// store's own reads are short), and the writer retries then.
const DefaultWALCheckpointSize = 16 << 20

// Open opens or creates the state file at path (mode 0600), applies the
// migrations it lacks, and starts the writer, with the default Options.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options.
func OpenWith(path string, o Options) (*Store, error) {
	if o.WALCheckpointSize <= 0 {
		o.WALCheckpointSize = DefaultWALCheckpointSize
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, err
	}
	s, err := open(path, o)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// ErrLocked is returned by Open when another process has the state file
// open.
var ErrLocked = errors.New("another bcpgw is using this state file")

// lockFile takes an exclusive lock on path, held until the returned file
// is closed (or the process exits, however it exits). Two gateways on one
// state file would each deliver its outbox.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock state: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(path, ".lock"), ErrLocked)
		}
		return nil, fmt.Errorf("lock state: %w", err)
	}
	return f, nil
}

func open(path string, o Options) (*Store, error) {
	// Create the file ourselves so that its mode is 0600 from the start;
	// never through a symbolic link.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	f.Close()
	dsn := func(extra string) string {
		return "file:" + uriPath(path) + "?_pragma=busy_timeout(" + itoa(busyTimeoutMS) + ")&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)" + extra
	}
	// The writer never checkpoints: a checkpoint syncs the database file,
	// and the commit that triggered it would wait for that. The
	// checkpointer goroutine does it on a connection of its own.
	//
	// journal_size_limit: when SQLite starts the WAL over (after a
	// checkpoint that copied all of it), it truncates the file to this
	// size, so a file that grew past it does not stay that large.
	sizeLimit := fmt.Sprintf("&_pragma=journal_size_limit(%d)", o.WALCheckpointSize)
	wdb, err := sql.Open("sqlite", dsn("&_txlock=immediate&_pragma=wal_autocheckpoint(0)"+sizeLimit))
	if err != nil {
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	if err := migrate(wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("state %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", dsn("&_pragma=query_only(ON)"))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(4)
	cdb, err := sql.Open("sqlite", dsn(sizeLimit))
	if err != nil {
		wdb.Close()
		rdb.Close()
		return nil, fmt.Errorf("open state %s: %w", path, err)
	}
	cdb.SetMaxOpenConns(1)
	s := &Store{
		path: path, wdb: wdb, rdb: rdb, cdb: cdb, ops: make(chan op, 4*maxBatch), done: make(chan struct{}),
		stmts: map[string]*sql.Stmt{}, stopCheckpoints: make(chan struct{}), checkpointsDone: make(chan struct{}),
		changed: make(chan struct{}), walLimit: o.WALCheckpointSize,
	}
	// Prepared on the one write connection while it is free; a
	// transaction on it then reuses them.
	for _, q := range writeStatements() {
		st, err := wdb.Prepare(q)
		if err != nil {
			wdb.Close()
			rdb.Close()
			cdb.Close()
			return nil, fmt.Errorf("state %s: prepare: %w", path, err)
		}
		s.stmts[q] = st
	}
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// checkpointInterval is how often the checkpointer copies committed pages
// from the WAL into the database file.
const checkpointInterval = 500 * time.Millisecond

// checkpointer runs passive checkpoints, which never block the writer,
// until Close; then one that truncates the WAL.
func (s *Store) checkpointer() {
	defer close(s.checkpointsDone)
	tick := time.NewTicker(checkpointInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			// The writer's own checkpoint goes first: it would find
			// the checkpoint lock taken and have to try again later.
			if s.ckptMu.TryLock() {
				_, _ = s.cdb.Exec("PRAGMA wal_checkpoint(PASSIVE)")
				s.ckptMu.Unlock()
			}
		case <-s.stopCheckpoints:
			return
		}
	}
}

// migrationSteps are done in Go right after the migration of their
// number, in its transaction: data the SQL alone cannot move.
var migrationSteps = map[int]func(*sql.Tx) error{
	3: backfillExposure,
}

// migrate applies the embedded migrations newer than the file's
// user_version, all in one transaction.
func migrate(db *sql.DB) error {
	var version int
	if err := db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	latest := 0
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, name := range names {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(name), "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with its number", name)
		}
		latest = max(latest, n)
		if n <= version {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", name, err)
		}
		if step := migrationSteps[n]; step != nil {
			if err := step(tx); err != nil {
				return fmt.Errorf("migration %s: %w", name, err)
			}
		}
	}
	if version > latest {
		return fmt.Errorf("schema version %d is newer than this bcpgw knows (%d): use a newer bcpgw", version, latest)
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", latest)); err != nil {
		return err
	}
	return tx.Commit()
}

// uriPath is path as it goes into a file: URI, where ?, # and % are not
// literal.
func uriPath(path string) string {
	return strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(filepath.ToSlash(path))
}

// Path is the state file's path.
func (s *Store) Path() string { return s.path }

// Close waits for every submitted write to be committed, then closes the
// file. Safe to call more than once.
func (s *Store) Close() error {
	if s.readOnly {
		return s.rdb.Close()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	close(s.ops)
	s.mu.Unlock()
	<-s.done
	close(s.stopCheckpoints)
	<-s.checkpointsDone
	for _, st := range s.stmts {
		st.Close()
	}
	_, err := s.cdb.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	err = errors.Join(err, s.wdb.Close(), s.rdb.Close(), s.cdb.Close())
	if s.lock != nil {
		err = errors.Join(err, s.lock.Close())
	}
	return err
}

// submit queues a write. It blocks only while the queue is full.
func (s *Store) submit(o op) error {
	if s.readOnly {
		return ErrReadOnly
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.ops <- o
	return nil
}

// write runs fn in the next group commit and waits until it is durable.
// An error means fn's changes were not stored: if ctx ends before the
// writer has reached fn, fn is skipped and write returns ctx.Err() at
// once; if fn has started, write waits for the outcome of its commit.
// (fn never runs after write has returned, so it may set the caller's
// variables.)
func (s *Store) write(ctx context.Context, fn func(*wtx) error) error {
	return s.writeCommitted(ctx, fn, nil)
}

// writeCommitted is write, and calls committed (if not nil) on the writer
// goroutine once fn's changes are durable, before write returns and before
// the callbacks of the writes committed after them. committed must not
// block.
func (s *Store) writeCommitted(ctx context.Context, fn func(*wtx) error, committed func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// claim is who has fn: claimWriter once the writer has run it (it
	// may run it again, see commit), claimCaller once the caller gave up.
	const (
		unclaimed = iota
		claimWriter
		claimCaller
	)
	var claim atomic.Int32
	done := make(chan error, 1)
	run := func(tx *wtx) error {
		if !claim.CompareAndSwap(unclaimed, claimWriter) && claim.Load() != claimWriter {
			return context.Canceled // nobody waits for it any more
		}
		return fn(tx)
	}
	finished := func(err error) {
		if err == nil && committed != nil {
			committed()
		}
		done <- err
	}
	if err := s.submit(op{fn: run, done: finished}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if claim.CompareAndSwap(unclaimed, claimCaller) {
			return ctx.Err() // fn will not run
		}
		return <-done // fn ran or is running: its commit decides
	}
}

// Flush waits until every write queued before it is durable: a read after
// it sees them (writes nobody waits for otherwise linger, see
// asyncLinger).
func (s *Store) Flush(ctx context.Context) error {
	return s.write(ctx, func(*wtx) error { return nil })
}

// writeThen queues fn and calls then with the outcome once it is durable,
// on the writer goroutine: then must not block. If the store is closed,
// then runs at once with ErrClosed.
func (s *Store) writeThen(fn func(*wtx) error, then func(error)) {
	if err := s.submit(op{fn: fn, done: then}); err != nil {
		then(err)
	}
}

// writeAsync queues fn without waiting for it; a failure is lost, so it
// is only for records whose loss the design tolerates (see callers).
func (s *Store) writeAsync(fn func(*wtx) error) {
	_ = s.submit(op{fn: fn})
}

// writer owns the write connection: it commits the queued writes in
// batches until Close.
func (s *Store) writer() {
	defer close(s.done)
	batch := make([]op, 0, maxBatch)
	for first := range s.ops {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < maxBatch {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		if !waited(batch) {
			batch = s.linger(batch)
		}
		s.commit(batch)
		s.boundWAL()
	}
}

// asyncLinger is how long a batch in which nobody waits for the commit
// (delivery bookkeeping, audit events) waits for more writes before it is
// committed. Every commit costs an fsync, and a commit in progress delays
// the next publish's. Bookkeeping can wait: it rides on the next commit
// somebody waits for (linger ends as soon as one is queued), so that at a
// steady 100 pushes a second each push costs one fsync, not two; when
// nothing else comes, it is committed after asyncLinger. A crash loses at
// most that much bookkeeping, which its callers tolerate (MarkAttempted,
// FinishDelivery, Append).
const asyncLinger = 100 * time.Millisecond

func waited(batch []op) bool {
	for _, o := range batch {
		if o.done != nil {
			return true
		}
	}
	return false
}

// linger adds writes to a batch nobody waits for, until one that somebody
// waits for arrives, the batch is full, or asyncLinger has passed.
func (s *Store) linger(batch []op) []op {
	t := time.NewTimer(asyncLinger)
	defer t.Stop()
	for len(batch) < maxBatch {
		select {
		case o, ok := <-s.ops:
			if !ok {
				return batch
			}
			batch = append(batch, o)
			if o.done != nil {
				return batch
			}
		case <-t.C:
			return batch
		}
	}
	return batch
}

// commit runs one batch in one transaction and reports to each waiter.
//
// Writes almost never fail on their own, so the batch is first run
// without savepoints (two statements fewer per write); only if one of
// them fails is the transaction rolled back and the batch run again, each
// write in a savepoint of its own, so that the failure undoes only that
// write. Writes must therefore be safe to run twice (see op).
func (s *Store) commit(batch []op) {
	errs := make([]error, len(batch))
	err := s.commitOnce(batch, errs, false)
	if errors.Is(err, errRetryWithSavepoints) {
		clear(errs)
		err = s.commitOnce(batch, errs, true)
	}
	for i, o := range batch {
		if o.done == nil {
			continue
		}
		if err != nil {
			o.done(fmt.Errorf("commit: %w", err))
		} else {
			o.done(errs[i])
		}
	}
}

// errRetryWithSavepoints says a write of a batch run without savepoints
// failed: the batch was rolled back and must be run with them.
var errRetryWithSavepoints = errors.New("a write failed: run the batch with savepoints")

// commitOnce runs batch in one transaction, each write in a savepoint if
// isolate, and commits it. Without isolate, a failing write rolls the
// whole transaction back and errRetryWithSavepoints is returned.
func (s *Store) commitOnce(batch []op, errs []error, isolate bool) error {
	tx, err := s.wdb.Begin()
	if err != nil {
		return err
	}
	w := &wtx{Tx: tx, s: s}
	for i, o := range batch {
		if isolate {
			errs[i] = savepoint(w, o.fn)
			continue
		}
		if errs[i] = o.fn(w); errs[i] != nil {
			_ = tx.Rollback()
			return errRetryWithSavepoints
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.walStats.commits.Add(1)
	if w.events {
		s.eventsCommitted()
	}
	return nil
}

// savepoint runs fn so that its failure undoes only its own changes.
func savepoint(tx *wtx, fn func(*wtx) error) error {
	if _, err := tx.Exec(sqlSavepoint); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_, _ = tx.Exec(sqlRollbackTo)
		_, _ = tx.Exec(sqlRelease)
		return err
	}
	_, err := tx.Exec(sqlRelease)
	return err
}

// NewID returns a fresh random identifier: prefix, then n base32
// characters (5 bits each) from crypto/rand.
func NewID(prefix string, n int) string {
	const alphabet = "abcdefghijkmnpqrstuvwxyz23456789" // no l, o, 0, 1
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return prefix + string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

func millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
