package store

// The statements of the write path, prepared once when the store opens
// (see wtx).
const (
	sqlInsertApproval = `INSERT INTO approvals (id, status, controller, reader, subscription_id, query_id, request_id,
			category, directive, response, sha256, anomalies, bits, created_at, expires_at, required) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	sqlApprovalByID   = `SELECT ` + approvalColumns + ` FROM approvals WHERE id = ?`
	sqlDecideApproval = `UPDATE approvals SET status = ?, decided_at = ?, decided_by = ?, reason = ?, note = ?,
		decided_uid = ?, decided_pid = ?, decided_sha256 = ?, grants = ? WHERE id = ?`
	// An approval counted towards an item's quorum (approval.go: grant).
	sqlGrantApproval  = `UPDATE approvals SET grants = ? WHERE id = ? AND status = 'pending'`
	sqlInsertDelivery = `INSERT INTO deliveries (id, controller, reader, subscription_id, query_id, request_id,
		approval_id, category, response, anomalies, bits, created_at, state, entity, batch_id, items) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`
	sqlMarkAttempted  = `UPDATE deliveries SET attempts = attempts + 1 WHERE id = ?`
	sqlRecordFailure  = `UPDATE deliveries SET failures = failures + 1 WHERE id = ?`
	sqlFinishDelivery = `UPDATE deliveries SET state = ?, done_at = ?, done_detail = ? WHERE id = ? AND state = 'pending'`
	sqlFinishSent     = `UPDATE deliveries SET state = ?, done_at = ?, done_detail = ?, attempts = attempts + 1 WHERE id = ? AND state = 'pending'`
	sqlInsertEvent    = `INSERT INTO events (time, kind, agent, peer, code, detail, category, bits, ref, payload)
			VALUES (?,?,?,?,?,?,?,?,?,?)`
	// The exposure figures (exposure.go).
	sqlOpenSession = `INSERT INTO exposure_sessions (agent, ref, started_at) VALUES (?,?,?)`
	sqlEndSession  = `UPDATE exposure_sessions SET ended_at = ? WHERE id =
		(SELECT max(id) FROM exposure_sessions WHERE ref = ? AND ref <> '') AND ended_at = 0`
	sqlAddExposure = `INSERT INTO exposure (session, reader, category, deliveries, bits)
		SELECT id, ?, ?, 1, ? FROM exposure_sessions WHERE agent = ? AND started_at <= ? ORDER BY id DESC LIMIT 1
		ON CONFLICT (session, reader, category) DO UPDATE SET deliveries = deliveries + 1, bits = bits + excluded.bits`
	sqlSavepoint  = "SAVEPOINT op"
	sqlRollbackTo = "ROLLBACK TO op"
	sqlRelease    = "RELEASE op"
)

// writeStatements lists the statements Open prepares.
func writeStatements() []string {
	return []string{sqlInsertApproval, sqlApprovalByID, sqlDecideApproval, sqlGrantApproval, sqlInsertDelivery, sqlMarkAttempted, sqlRecordFailure, sqlFinishDelivery, sqlFinishSent, sqlInsertEvent,
		sqlOpenSession, sqlEndSession, sqlAddExposure, sqlFigureUpsert, sqlRefusalUpsert, sqlSavepoint, sqlRollbackTo, sqlRelease,
		sqlBatchLine, sqlBatchSize, sqlOpenBatch, sqlReplaceable, sqlSupersede, sqlBatchHeld, sqlBatchClose}
}
