-- Per-subscription figures (bcpgw report, and the metrics' labels after a
-- restart): what each subscription carried, kept up to date in the
-- transaction that stores the events they come from, so that they
-- outlive those events when retention deletes them. Only events the
-- gateway tagged with a subscription of the definitions in force (or
-- approved at run time) count: a Reader cannot add rows with ids of its
-- own. Counts start when this migration runs.
CREATE TABLE subscription_figures (
	controller TEXT    NOT NULL,
	reader     TEXT    NOT NULL,
	id         TEXT    NOT NULL, -- the subscription id
	accepted   INTEGER NOT NULL DEFAULT 0, -- pushes accepted (delivered or held for review)
	held       INTEGER NOT NULL DEFAULT 0, -- of those, held for an operator
	filtered   INTEGER NOT NULL DEFAULT 0, -- accepted, kept from the Controller by its filter
	refused    INTEGER NOT NULL DEFAULT 0,
	superseded INTEGER NOT NULL DEFAULT 0, -- accepted, then replaced by a newer push (debounce)
	delivered  INTEGER NOT NULL DEFAULT 0, -- deliveries the Controller acknowledged (a batch is one)
	bits       REAL    NOT NULL DEFAULT 0, -- bits charged for the accepted pushes, less the superseded ones
	PRIMARY KEY (controller, reader, id)
) WITHOUT ROWID;

-- Refusals by code, per subscription.
CREATE TABLE subscription_refusals (
	controller TEXT    NOT NULL,
	reader     TEXT    NOT NULL,
	id         TEXT    NOT NULL,
	code       TEXT    NOT NULL,
	n          INTEGER NOT NULL,
	PRIMARY KEY (controller, reader, id, code)
) WITHOUT ROWID;
