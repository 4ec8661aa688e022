-- Reads whose cost follows what they return, whatever the size of the
-- tables (bcpgw events --agent, approvals.list pages).
--
-- Events about one agent, in seq order: bcpgw events --agent NAME reads
-- its range. One more index entry per event stored.
CREATE INDEX events_by_agent ON events (agent, seq);

-- Approval items of one status in seq order: a page of approvals.list is
-- a range of it (approvals_by_status is ordered by expiry, for the
-- expiry check, so a page read through it sorted every item of the status).
CREATE INDEX approvals_by_status_seq ON approvals (status, seq);
