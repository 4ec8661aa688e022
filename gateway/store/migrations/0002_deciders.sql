-- Who decided an approval item, from the control socket's peer
-- credentials, and the hash of the content they were shown.
ALTER TABLE approvals ADD COLUMN decided_uid    INTEGER NOT NULL DEFAULT 0;
ALTER TABLE approvals ADD COLUMN decided_pid    INTEGER NOT NULL DEFAULT 0;
ALTER TABLE approvals ADD COLUMN decided_sha256 TEXT    NOT NULL DEFAULT '';

-- Events read by kind: `bcpgw events --type`, and the exposure report.
CREATE INDEX events_by_kind ON events (kind, seq);
