-- The outbox: every accepted push or answer, from commit until the
-- Controller's runtime has answered result for it (or it was dropped).
CREATE TABLE deliveries (
	seq             INTEGER PRIMARY KEY AUTOINCREMENT,
	id              TEXT    NOT NULL UNIQUE,
	controller      TEXT    NOT NULL,
	reader          TEXT    NOT NULL,
	subscription_id TEXT    NOT NULL DEFAULT '',
	query_id        TEXT    NOT NULL DEFAULT '',
	request_id      TEXT    NOT NULL DEFAULT '',
	approval_id     TEXT    NOT NULL DEFAULT '',
	category        INTEGER NOT NULL,
	response        TEXT    NOT NULL,
	anomalies       TEXT    NOT NULL DEFAULT '[]',
	bits            REAL    NOT NULL,
	state           TEXT    NOT NULL DEFAULT 'pending',
	attempts        INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL,
	done_at         INTEGER NOT NULL DEFAULT 0,
	done_detail     TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX deliveries_by_state ON deliveries (state, seq);

-- Items waiting for an operator: Cat-3 pushes and answers, and Cat-2
-- ones whose anomalies route them to review.
CREATE TABLE approvals (
	seq             INTEGER PRIMARY KEY AUTOINCREMENT,
	id              TEXT    NOT NULL UNIQUE,
	status          TEXT    NOT NULL DEFAULT 'pending',
	controller      TEXT    NOT NULL,
	reader          TEXT    NOT NULL,
	subscription_id TEXT    NOT NULL DEFAULT '',
	query_id        TEXT    NOT NULL DEFAULT '',
	request_id      TEXT    NOT NULL DEFAULT '',
	category        INTEGER NOT NULL,
	directive       TEXT    NOT NULL DEFAULT '',
	response        TEXT    NOT NULL,
	sha256          TEXT    NOT NULL,
	anomalies       TEXT    NOT NULL DEFAULT '[]',
	bits            REAL    NOT NULL,
	created_at      INTEGER NOT NULL,
	expires_at      INTEGER NOT NULL,
	decided_at      INTEGER NOT NULL DEFAULT 0,
	decided_by      TEXT    NOT NULL DEFAULT '',
	reason          TEXT    NOT NULL DEFAULT '',
	note            TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX approvals_by_status ON approvals (status, expires_at);

-- The audit trail. seq is the cursor operators read with.
CREATE TABLE events (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	time     INTEGER NOT NULL,
	kind     TEXT    NOT NULL,
	agent    TEXT    NOT NULL DEFAULT '',
	peer     TEXT    NOT NULL DEFAULT '',
	code     TEXT    NOT NULL DEFAULT '',
	detail   TEXT    NOT NULL DEFAULT '',
	category INTEGER NOT NULL DEFAULT 0,
	bits     REAL    NOT NULL DEFAULT 0,
	ref      TEXT    NOT NULL DEFAULT '',
	payload  BLOB
);
