package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/bcpgw/bcpgw/agents"
)

// compatFlags are the flags that read another gateway's definitions:
// --compat trionyx, --default-runtime and --trionyx-workspace, shared by
// validate, check, run and doctor.
type compatFlags struct {
	compat, defaultRuntime, workspace string
}

const compatHelp = `
--compat trionyx reads TriOnyx agent definitions instead (see README,
"Coming from TriOnyx"): fs_read, fs_write and network become the sandbox,
channel rates become enforced rate limits, and the TriOnyx keys bcpgw does
not enforce are accepted with a warning each. --default-runtime gives the
runtime of the definitions that name none (TriOnyx's have no runtime key),
and --trionyx-workspace the workspace their paths are written against
(default: the parent of the definitions directory). Without --compat,
definitions are read strictly in bcpgw's own format.`

func (c *compatFlags) add(f *pflag.FlagSet) {
	f.StringVar(&c.compat, "compat", os.Getenv("BCPGW_COMPAT"), "read definitions in another gateway's format: trionyx (env BCPGW_COMPAT)")
	f.StringVar(&c.defaultRuntime, "default-runtime", "", "with --compat trionyx: the runtime (program and arguments) of definitions that name none")
	f.StringVar(&c.workspace, "trionyx-workspace", "", "with --compat trionyx: the TriOnyx workspace fs_read/fs_write are written against (default: the parent of the definitions directory)")
}

// options returns the load options the flags ask for. makeDirs is for
// bcpgw run, which must create the directories TriOnyx agents may write.
func (c *compatFlags) options(stateDir string, makeDirs bool) (agents.LoadOptions, error) {
	compat, err := agents.ParseCompat(c.compat)
	if err != nil {
		return agents.LoadOptions{}, fmt.Errorf("--compat: %w", err)
	}
	opts := agents.LoadOptions{StateDir: stateDir, Compat: compat}
	if compat != agents.CompatTriOnyx {
		switch {
		case c.defaultRuntime != "":
			return opts, fmt.Errorf("--default-runtime needs --compat trionyx (bcpgw definitions name their runtime)")
		case c.workspace != "":
			return opts, fmt.Errorf("--trionyx-workspace needs --compat trionyx")
		}
		return opts, nil
	}
	opts.MakeDirs = makeDirs
	if c.workspace != "" {
		opts.Workspace = absDir(c.workspace)
	}
	if c.defaultRuntime != "" {
		argv := strings.Fields(c.defaultRuntime)
		if len(argv) == 0 {
			return opts, fmt.Errorf("--default-runtime: empty; give the program and its arguments")
		}
		// A relative program path is relative to where the command runs
		// (not to each definition file, as a runtime key is).
		if !filepath.IsAbs(argv[0]) && strings.Contains(argv[0], "/") {
			argv[0] = absDir(argv[0])
		}
		opts.DefaultRuntime = argv
	}
	return opts, nil
}

func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// budgetText shows a channel budget; TriOnyx channels without one are
// unlimited.
func budgetText(bits int64) string {
	if bits >= agents.UnlimitedBudget {
		return "unlimited"
	}
	return fmt.Sprintf("%d bits", bits)
}

// ratesText shows both sides' rates of a TriOnyx channel, or "".
func ratesText(l *agents.Link) string {
	var parts []string
	for _, side := range []struct {
		name  string
		rates *agents.Rates
	}{{l.Controller.Name, l.ControllerSide.Rates}, {l.Reader.Name, l.ReaderSide.Rates}} {
		if side.rates != nil {
			parts = append(parts, fmt.Sprintf("cat1 %s, cat2 %s, cat3 %s (%s)", side.rates.Cat1, side.rates.Cat2, side.rates.Cat3, side.name))
		}
	}
	return strings.Join(parts, "; ")
}

// ratesReport is one side's rates in validate --json, or nil.
func ratesReport(r *agents.Rates) map[string]string {
	if r == nil {
		return nil
	}
	return map[string]string{"cat1": r.Cat1.String(), "cat2": r.Cat2.String(), "cat3": r.Cat3.String()}
}
