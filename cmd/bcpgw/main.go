// Command bcpgw is the operator's binary for the BCP gateway: it checks
// agent definitions, dry-runs publishes and (in later versions) runs the
// gateway itself. It is flags and wiring only; the work lives in the
// agents, bcp and gateway packages.
package main

import "os"

func main() {
	os.Exit(execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
