package main

// End-to-end tests of definition reloads: a real `bcpgw run` as a
// subprocess (see operator_test.go), its agents directory edited on disk,
// and the reload asked for by `bcpgw reload`, by SIGHUP, or by the file
// change itself (--watch). What took effect is read back with
// `bcpgw agents --json` and `bcpgw events --json`.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/control"
)

// startWith is opGateway.start with extra `bcpgw run` flags.
func (g *opGateway) startWith(pub string, extra ...string) {
	g.t.Helper()
	g.runArgs = extra
	g.start(pub)
}

// waitLog waits until the gateway's log holds text.
func (g *opGateway) waitLog(text string) {
	g.t.Helper()
	opWait(g.t, fmt.Sprintf("%q in the gateway log", text), func() (bool, string) {
		select {
		case <-g.exited:
			g.t.Fatalf("bcpgw run exited (%v)\n%s", g.err, g.stderr.String())
		default:
		}
		return strings.Contains(g.stderr.String(), text), g.stderr.String()
	})
}

// defPath is the path of a definition file in the agents directory.
func (g *opGateway) defPath(file string) string { return filepath.Join(g.agents, file) }

// editDef replaces old with new once in the agents directory's file, and
// returns the new text.
func (g *opGateway) editDef(file, old, new string) string {
	g.t.Helper()
	b, err := os.ReadFile(g.defPath(file))
	if err != nil {
		g.t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		g.t.Fatalf("%q not found in %s:\n%s", old, file, b)
	}
	s := strings.Replace(string(b), old, new, 1)
	if err := os.WriteFile(g.defPath(file), []byte(s), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return s
}

// lineOf is the 1-based number of the first line of text holding sub.
func lineOf(t *testing.T, text, sub string) int {
	t.Helper()
	i := strings.Index(text, sub)
	if i < 0 {
		t.Fatalf("%q not in:\n%s", sub, text)
	}
	return strings.Count(text[:i], "\n") + 1
}

// reloadEvents returns the reload_ok and reload_failed events.
func (g *opGateway) reloadEvents() (ok, failed []control.Event) {
	g.t.Helper()
	for _, e := range g.events("--type", "reload_*") {
		switch e.Kind {
		case "reload_ok":
			ok = append(ok, e)
		case "reload_failed":
			failed = append(failed, e)
		default:
			g.t.Errorf("unexpected event kind %q from --type reload_*: %+v", e.Kind, e)
		}
	}
	return ok, failed
}

// waitReloads waits until there are nOK reload_ok and nFailed
// reload_failed events, and returns them.
func (g *opGateway) waitReloads(nOK, nFailed int) (ok, failed []control.Event) {
	g.t.Helper()
	opWait(g.t, fmt.Sprintf("%d reload_ok and %d reload_failed events", nOK, nFailed), func() (bool, string) {
		ok, failed = g.reloadEvents()
		return len(ok) == nOK && len(failed) == nFailed, fmt.Sprintf("reload_ok %+v\nreload_failed %+v\ngateway log:\n%s", ok, failed, g.stderr.String())
	})
	return ok, failed
}

// mainBudget is main's side of its channel, as agents --json shows it.
func (g *opGateway) mainBudget() float64 {
	g.t.Helper()
	m := g.agentsList()["main"]
	if len(m.Channels) != 1 {
		g.t.Fatalf("main's channels: %+v", m.Channels)
	}
	return m.Channels[0].BudgetBits
}

// operatorRef is how reload events name this process's user, without the
// pid of the command.
func operatorRef() string {
	return opUser() + " (uid " + strconv.Itoa(os.Getuid()) + ", pid "
}

// A valid edit: `bcpgw reload` puts it in force, prints what changed,
// records reload_ok; --json prints a control.ReloadResult; a reload with
// nothing changed says so.
func TestCLIReloadValidEdit(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	// No watcher: only the reloads the test asks for happen.
	g.startWith("[]", "--watch=false")
	if b := g.mainBudget(); b != 10000000 {
		t.Fatalf("main's budget_bits before the edit: %v", b)
	}

	g.editDef("main.md", "budget_bits: 10000000", "budget_bits: 20000000")
	g.editDef("main.md", "name: main\n", "name: main\ndescription: Edited by the reload test.\n")
	r := g.ok("reload")
	if r.stdout != "reloaded 2 agents:\n  changed (in force now): main\n" || r.stderr != "" {
		t.Errorf("reload after a budget and description edit:\n%s", r)
	}
	if b := g.mainBudget(); b != 20000000 {
		t.Errorf("main's budget_bits after the reload: %v, want 20000000", b)
	}
	if d := g.agentsList()["main"].Description; d != "Edited by the reload test." {
		t.Errorf("main's description after the reload: %q", d)
	}
	ok, _ := g.waitReloads(1, 0)
	if e := ok[0]; !strings.HasPrefix(e.Ref, operatorRef()) || !strings.HasPrefix(e.Detail, "by "+e.Ref+": ") ||
		!strings.Contains(e.Detail, "changed (in force now): main") || e.Code != "" {
		t.Errorf("reload_ok event %+v: want it to name the operator and what changed", e)
	}
	// The text listing shows it too.
	if r := g.ok("events", "--type", "reload_ok"); strings.Count(r.stdout, "reload_ok") != 1 || !strings.Contains(r.stdout, "changed (in force now): main") {
		t.Errorf("events --type reload_ok:\n%s", r)
	}

	// --json.
	g.editDef("main.md", "budget_bits: 20000000", "budget_bits: 30000000")
	var res control.ReloadResult
	opJSON(t, g.ok("reload", "--json").stdout, &res)
	if !res.Changed || res.Agents != 2 || !slices.Equal(res.Summary, []string{"changed (in force now): main"}) {
		t.Errorf("reload --json after an edit: %+v", res)
	}
	if b := g.mainBudget(); b != 30000000 {
		t.Errorf("main's budget_bits after reload --json: %v, want 30000000", b)
	}

	// Nothing changed since.
	res = control.ReloadResult{}
	opJSON(t, g.ok("reload", "--json").stdout, &res)
	if res.Changed || res.Agents != 2 || len(res.Summary) != 0 {
		t.Errorf("reload --json with nothing changed: %+v", res)
	}
	if r := g.ok("reload"); r.stdout != "reloaded 2 agents: no changes\n" {
		t.Errorf("reload with nothing changed:\n%s", r)
	}
	ok, _ = g.waitReloads(4, 0)
	if !strings.HasSuffix(ok[3].Detail, ": no changes") {
		t.Errorf("reload_ok of an unchanged set: %+v", ok[3])
	}
}

// An invalid edit: `bcpgw reload` exits 1 naming the file, line and field;
// nothing changes and the gateway goes on serving; once fixed, the edit
// loads.
func TestCLIReloadInvalidEdit(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.startWith("[]", "--watch=false")
	opWait(t, "the researcher to run", func() (bool, string) {
		a := g.agentsList()["researcher"]
		return a.State == "running", fmt.Sprintf("%+v", a)
	})
	before := g.ok("agents", "--json").stdout

	// A valid change and an invalid one in the same file: neither applies.
	g.editDef("main.md", "budget_bits: 10000000", "budget_bits: 20000000")
	text := g.editDef("main.md", "max_category: 3", "max_category: 7")
	line := lineOf(t, text, "max_category: 7")
	for _, args := range [][]string{{"reload"}, {"reload", "--json"}} {
		r := g.bcpgw(args...)
		want := fmt.Sprintf("%s:%d: bcp_channels[0].max_category: ", g.defPath("main.md"), line)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "the running set stays in force") {
			t.Errorf("%q after an invalid edit: want exit 1 and %q on stderr\n%s", args, want, r)
		}
	}
	if r := g.ok("status"); r.code != 0 {
		t.Errorf("status after a refused reload:\n%s", r)
	}
	if after := g.ok("agents", "--json").stdout; after != before {
		t.Errorf("agents --json changed after a refused reload\nbefore:\n%s\nafter:\n%s", before, after)
	}
	_, failed := g.waitReloads(0, 2)
	for _, e := range failed {
		if e.Code != "definitions_invalid" || !strings.HasPrefix(e.Ref, operatorRef()) ||
			!strings.Contains(e.Detail, fmt.Sprintf("main.md:%d: bcp_channels[0].max_category", line)) {
			t.Errorf("reload_failed event %+v", e)
		}
	}

	// Fixed: the valid change loads.
	g.editDef("main.md", "max_category: 7", "max_category: 3")
	if r := g.ok("reload"); !strings.Contains(r.stdout, "changed (in force now): main") {
		t.Errorf("reload after the fix:\n%s", r)
	}
	if b := g.mainBudget(); b != 20000000 {
		t.Errorf("main's budget_bits after the fix: %v, want 20000000", b)
	}
	g.waitReloads(1, 2)
}

// SIGHUP reloads, valid or not, and the gateway goes on.
func TestCLIReloadSIGHUP(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.startWith("[]", "--watch=false")
	pid := g.cmd.Process.Pid

	g.editDef("main.md", "budget_bits: 10000000", "budget_bits: 20000000")
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ok, _ := g.waitReloads(1, 0)
	if e := ok[0]; e.Ref != "SIGHUP" || e.Detail != "by SIGHUP: changed (in force now): main" {
		t.Errorf("reload_ok after SIGHUP: %+v", e)
	}
	if b := g.mainBudget(); b != 20000000 {
		t.Errorf("main's budget_bits after SIGHUP: %v, want 20000000", b)
	}

	// An invalid edit: refused, evented, logged; the process lives on.
	text := g.editDef("researcher.md", "budget_bits: 10000000", "budget_bits: lots")
	line := lineOf(t, text, "budget_bits: lots")
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	_, failed := g.waitReloads(1, 1)
	if e := failed[0]; e.Ref != "SIGHUP" || e.Code != "definitions_invalid" ||
		!strings.HasPrefix(e.Detail, "by SIGHUP: ") || !strings.Contains(e.Detail, fmt.Sprintf("researcher.md:%d: bcp_channels[0].budget_bits", line)) {
		t.Errorf("reload_failed after SIGHUP: %+v", e)
	}
	g.waitLog("reload refused")
	if st := g.status(); st.PID != pid {
		t.Errorf("status after SIGHUPs answers from pid %d, want %d", st.PID, pid)
	}
	if b := g.mainBudget(); b != 20000000 {
		t.Errorf("main's budget_bits after a refused SIGHUP reload: %v, want 20000000", b)
	}
}

// With the default --watch, an edit is reloaded without any command;
// with --watch=false it is not (the later explicit reload is the one that
// finds it).
func TestCLIReloadWatch(t *testing.T) {
	t.Parallel()
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		g := newOpEnv(t)
		g.startWith("[]") // --watch is on by default
		g.waitLog("watching the definitions for changes")

		g.editDef("main.md", "budget_bits: 10000000", "budget_bits: 20000000")
		ok, _ := g.waitReloads(1, 0)
		if e := ok[0]; e.Ref != "file change" || e.Detail != "by file change: changed (in force now): main" {
			t.Errorf("reload_ok after an edit: %+v", e)
		}
		if b := g.mainBudget(); b != 20000000 {
			t.Errorf("main's budget_bits after the watched edit: %v, want 20000000", b)
		}

		// An invalid edit is refused the same way.
		g.editDef("main.md", "max_category: 3", "max_category: 7")
		_, failed := g.waitReloads(1, 1)
		if e := failed[0]; e.Ref != "file change" || e.Code != "definitions_invalid" || !strings.Contains(e.Detail, "main.md:") {
			t.Errorf("reload_failed after an invalid edit: %+v", e)
		}
		if b := g.mainBudget(); b != 20000000 {
			t.Errorf("main's budget_bits after an invalid watched edit: %v, want 20000000", b)
		}
	})

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		g := newOpEnv(t)
		g.startWith("[]", "--watch=false")

		g.editDef("main.md", "budget_bits: 10000000", "budget_bits: 20000000")
		// The edit is still pending when the operator reloads: nothing
		// reloaded it before.
		if r := g.ok("reload"); r.stdout != "reloaded 2 agents:\n  changed (in force now): main\n" {
			t.Errorf("reload after an unwatched edit:\n%s", r)
		}
		// A second edit, then a second explicit reload: had a watcher
		// run, the first edit's file-change reload would be done by now.
		g.editDef("main.md", "budget_bits: 20000000", "budget_bits: 30000000")
		if r := g.ok("reload"); r.stdout != "reloaded 2 agents:\n  changed (in force now): main\n" {
			t.Errorf("second reload after an unwatched edit:\n%s", r)
		}
		ok, _ := g.waitReloads(2, 0)
		for _, e := range ok {
			if !strings.HasPrefix(e.Ref, operatorRef()) {
				t.Errorf("reload_ok not asked for by the operator: %+v", e)
			}
		}
		if log := g.stderr.String(); strings.Contains(log, "watching the definitions") || strings.Contains(log, "file change") {
			t.Errorf("--watch=false: the gateway watched the definitions:\n%s", log)
		}
	})
}

// No gateway: exit 3, as every client command.
func TestCLIReloadNoGateway(t *testing.T) {
	t.Parallel()
	empty := opStateDir(t)
	for _, args := range [][]string{{"reload"}, {"reload", "--json"}} {
		r := run(t, runOpts{env: opEnv}, append(slices.Clone(args), "--state", empty)...)
		sock := filepath.Join(empty, "control.sock")
		if r.code != 3 || r.stdout != "" || !strings.Contains(r.stderr, "not running") || !strings.Contains(r.stderr, sock) {
			t.Errorf("%q with no gateway: want exit 3 naming %s\n%s", args, sock, r)
		}
		if r := run(t, runOpts{env: opEnv}, args...); r.code != 2 || !strings.Contains(r.stderr, "--state") {
			t.Errorf("%q without --state: want exit 2 naming --state\n%s", args, r)
		}
	}
	// A gateway that has stopped leaves nothing to reload either.
	g := newOpEnv(t)
	g.startWith("[]", "--watch=false")
	g.stop()
	if r := g.bcpgw("reload"); r.code != 3 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("reload after the gateway stopped:\n%s", r)
	}
}
