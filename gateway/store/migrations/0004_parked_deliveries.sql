-- Deliveries that keep failing are parked for an operator instead of
-- dropped (state 'parked'; bcpgw deliveries). failures counts the
-- sessions that ended before acknowledging a delivery: unlike attempts
-- (sends, which decide the redelivered flag), a send cut off by the
-- gateway's own crash is not a failure.
ALTER TABLE deliveries ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;

-- The outbox reads each Controller's pending deliveries a page at a time,
-- in the order they were accepted.
CREATE INDEX deliveries_pending_by_controller ON deliveries (controller, seq) WHERE state = 'pending';
