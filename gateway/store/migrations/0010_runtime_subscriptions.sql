-- Subscriptions asked for at run time (BCPSubscribe) and approved by an
-- operator (issue 19). They are never written into a definition: the
-- gateway routes with the definitions plus the active rows here.
--
-- An approval item's kind says what approving it does: '' delivers its
-- response (a Cat-3 or flagged push or answer); 'subscription' adds the
-- subscription its response (a spec) describes, under subscription_id.
ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT '';
CREATE INDEX approvals_by_kind ON approvals (kind, controller) WHERE kind <> '' AND status = 'pending';

-- One row per approved request: active until revoked (by an operator, or
-- by a reload whose definitions it no longer fits). spec is the spec as
-- the item showed it (the wire's spelling), bits its cost per push.
CREATE TABLE runtime_subscriptions (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT,
	id           TEXT    NOT NULL UNIQUE,
	controller   TEXT    NOT NULL,
	reader       TEXT    NOT NULL,
	category     INTEGER NOT NULL,
	spec         TEXT    NOT NULL,
	bits         REAL    NOT NULL,
	request_id   TEXT    NOT NULL DEFAULT '',
	approval_id  TEXT    NOT NULL,
	status       TEXT    NOT NULL DEFAULT 'active',
	approved_at  INTEGER NOT NULL,
	approved_by  TEXT    NOT NULL DEFAULT '',
	approved_uid INTEGER NOT NULL DEFAULT 0,
	approved_pid INTEGER NOT NULL DEFAULT 0,
	revoked_at   INTEGER NOT NULL DEFAULT 0,
	revoked_by   TEXT    NOT NULL DEFAULT '',
	revoked_uid  INTEGER NOT NULL DEFAULT 0,
	revoked_pid  INTEGER NOT NULL DEFAULT 0,
	reason       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX runtime_subscriptions_active ON runtime_subscriptions (status, seq);
