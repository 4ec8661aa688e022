-- Fewer index writes per push. Every delivery's rows were kept in
-- deliveries_by_state (state, seq) too, which every push wrote twice
-- (inserted pending, moved to delivered) and whose only readers are served
-- better by partial indexes: the outbox and the pending counts read
-- deliveries_pending_by_controller, and what an operator lists by state is
-- either parked (below) or almost the whole table (delivered, dropped),
-- read in seq order.
DROP INDEX deliveries_by_state;
CREATE INDEX deliveries_parked ON deliveries (seq) WHERE state = 'parked';
