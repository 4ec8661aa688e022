// Command bcpgw is the operator's binary for the BCP gateway: it checks
// agent definitions, runs the gateway and talks to a running one. It is flags and wiring only; the work lives in the
// agents, bcp and gateway packages.
package main

import (
	"os"

	"github.com/bcpgw/bcpgw/gateway/sandbox"
)

func main() {
	// In the re-executed sandbox helper, this runs the helper and exits.
	sandbox.Init()
	os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
