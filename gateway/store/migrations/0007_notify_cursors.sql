-- Notifications by webhook (bcpgw run --notify): where each target of the
-- operator's notify file has got to in the event log, so that a restart
-- neither loses nor repeats what it sent.
--
-- cursor is the seq of the last event the target is done with (sent, or
-- not wanted, or given up); it only moves forward. A target disabled by
-- its endpoint (410 Gone) stays disabled, across restarts, until its URL
-- changes: url_sha256 is the hash of the URL that answered 410 (the URL
-- itself may be a secret, as Slack's are, and is not stored).
CREATE TABLE notify_targets (
	name            TEXT    PRIMARY KEY,
	cursor          INTEGER NOT NULL,
	disabled_at     INTEGER NOT NULL DEFAULT 0,
	disabled_reason TEXT    NOT NULL DEFAULT '',
	url_sha256      TEXT    NOT NULL DEFAULT '',
	updated_at      INTEGER NOT NULL
) WITHOUT ROWID;

-- One random id per state file. With the event's seq it makes the
-- idempotency key of a notification (webhook-id), which must not repeat
-- when an operator starts over with a new state directory and seqs start
-- again from 1.
CREATE TABLE notify_instance (id TEXT NOT NULL);
INSERT INTO notify_instance (id) VALUES (lower(hex(randomblob(8))));
