-- Retention (bcpgw run --retain) deletes finished deliveries by the time
-- they finished and decided approval items by the time they were
-- decided. Partial indexes: pending rows, the ones read on the hot path,
-- are not in them.
CREATE INDEX deliveries_finished ON deliveries (done_at) WHERE state <> 'pending';
CREATE INDEX approvals_decided ON approvals (decided_at) WHERE status <> 'pending';

-- The exposure report's figures, kept up to date in the transaction that
-- stores the events they come from (session_started, session_stopped,
-- session_crashed, delivery_sent, delivery_retried), so that they outlive
-- those events when retention deletes them. Filled from the events
-- already stored when this migration runs.
--
-- One row per session of any agent, in the order the sessions started;
-- ref is the session id ('' for a session that started before the log).
CREATE TABLE exposure_sessions (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	agent      TEXT    NOT NULL,
	ref        TEXT    NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL,
	ended_at   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX exposure_sessions_by_agent ON exposure_sessions (agent, id);
CREATE INDEX exposure_sessions_by_ref ON exposure_sessions (ref) WHERE ref <> '';

-- What each session was sent, by Reader and category.
CREATE TABLE exposure (
	session    INTEGER NOT NULL, -- exposure_sessions.id
	reader     TEXT    NOT NULL,
	category   INTEGER NOT NULL,
	deliveries INTEGER NOT NULL,
	bits       REAL    NOT NULL,
	PRIMARY KEY (session, reader, category)
) WITHOUT ROWID;
