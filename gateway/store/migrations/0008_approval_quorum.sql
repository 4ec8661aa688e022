-- Approval policies (a subscription's or channel's approvals:
-- {required: N}): how many approvals from distinct operators release an
-- item, fixed when it is queued, and those counted so far, as a JSON
-- list of {by: {name, uid, pid}, sha256, note, at}. Items queued before
-- this needed one approval.
ALTER TABLE approvals ADD COLUMN required INTEGER NOT NULL DEFAULT 1;
ALTER TABLE approvals ADD COLUMN grants   TEXT    NOT NULL DEFAULT '[]';
