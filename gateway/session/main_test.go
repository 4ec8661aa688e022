package session

import (
	"path/filepath"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/sandbox"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// The test binary doubles as the fake runtimes of the tests (package
// internal/fakert): started with fakert.Env in its environment, it plays
// that runtime instead of running tests.
func TestMain(m *testing.M) {
	testproc.Main(m, func(dir string) {
		testrtPath = filepath.Join(dir, "testrt")
		helperPath = filepath.Join(dir, sandbox.HelperName)
	}, "github.com/bcpgw/bcpgw/internal/testrt", "github.com/bcpgw/bcpgw/cmd/bcpgw-sandbox")
}

// testrtPath is the scriptable runtime (internal/testrt); helperPath the
// small sandbox helper (cmd/bcpgw-sandbox), which the start benchmark
// compares with the test binary re-executing itself (the default here, as
// no helper lies beside it).
var testrtPath, helperPath string
