// Command bcpgw-sandbox is the small helper that bcpgw re-executes to
// build each runtime's sandbox and stay in it as the runtime's init (see
// package gateway/sandbox). It is a program of its own so that an idle
// sandbox costs about a megabyte of private memory beside its runtime,
// not the gateway's whole binary initialised: bcpgw uses the
// bcpgw-sandbox next to its own executable, and re-executes itself when
// there is none. It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/bcpgw/bcpgw/gateway/sandbox"
)

func main() {
	sandbox.Init()
	fmt.Fprintln(os.Stderr, "bcpgw-sandbox: started by bcpgw to build a runtime's sandbox; not meant to be run by hand")
	os.Exit(2)
}
