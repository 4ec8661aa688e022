-- A subscription's debounce and batching (issue 19).
--
-- entity is a debounced push's key value (the JSON of its debounce
-- field or answer): a newer push with the same entity replaces a pending
-- one (state 'superseded'). Looked up among the pushes not yet delivered.
ALTER TABLE deliveries ADD COLUMN entity TEXT NOT NULL DEFAULT '';
-- batch_id is, on a push of a batched subscription, the id of the batch
-- delivery it goes into: 'held' while the batch is open, 'batched' once
-- it is closed into that delivery. items is, on a batch delivery, how
-- many pushes it holds (its response is their list); 0 otherwise.
ALTER TABLE deliveries ADD COLUMN batch_id TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN items INTEGER NOT NULL DEFAULT 0;

CREATE INDEX deliveries_by_entity ON deliveries (controller, reader, subscription_id, entity, seq)
	WHERE entity <> '' AND state IN ('pending', 'held');
-- The open batch of each subscription (its held pushes), and each batch's
-- pushes whatever their state: its window runs from the first one's
-- acceptance, across restarts, even if that one was superseded.
CREATE INDEX deliveries_held ON deliveries (controller, reader, subscription_id, seq) WHERE state = 'held';
CREATE INDEX deliveries_by_batch ON deliveries (batch_id, created_at) WHERE batch_id <> '';
