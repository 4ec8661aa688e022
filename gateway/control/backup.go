package control

import (
	"context"
	"path/filepath"
)

// MethodBackup writes a consistent copy of the state file (see
// Store.Backup) to a path on the gateway's host. Only the gateway's user
// and root may ask for one: a member of the operator group
// (ServerConfig.OperatorGroup) is refused with CodePermission, since the
// gateway, root, creates the file at a path the client names.
const MethodBackup = "backup"

// BackupParams are the params of backup. Path must be absolute (a
// client resolves a relative one against its own directory) and must not
// exist.
type BackupParams struct {
	Path string `json:"path"`
}

// BackupResult is the result of backup.
type BackupResult struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// Backup asks the gateway for a copy of its state file at path.
func (cl *Client) Backup(ctx context.Context, path string) (BackupResult, error) {
	var r BackupResult
	err := cl.Call(ctx, MethodBackup, BackupParams{Path: path}, &r)
	return r, err
}

func (cc *conn) backupCall(req *request) (any, error) {
	var p BackupParams
	if err := decode(req.Params, &p); err != nil {
		return nil, err
	}
	if cc.member {
		// The gateway (root, for an operator group) creates the file:
		// a member would create a root-owned file wherever they name,
		// holding text of theirs (notes, paths in events), such as
		// /etc/cron.d/x or /etc/ld.so.preload.
		return nil, Errorf(CodePermission, "backup writes a file as the gateway's user: only that user and root may ask for one, not the other members of the operator group")
	}
	if !filepath.IsAbs(p.Path) {
		return nil, Errorf(CodeInvalidParams, `"path" must be an absolute path`)
	}
	return cc.s.cfg.Backend.Backup(cc.ctx, cc.peer, p)
}
