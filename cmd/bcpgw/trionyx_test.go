package main

// bcpgw --compat trionyx with the real binary: TriOnyx definitions
// (written for these tests in TriOnyx's format) validated, checked and
// run, their fs_read/fs_write/network enforced by the sandbox, their
// channel rates by the gateway.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

var (
	probertOnce sync.Once
	probertBin  string
	probertErr  error
)

// probert builds the probing runtime once, next to the binaries TestMain
// built.
func probert(t *testing.T) string {
	t.Helper()
	probertOnce.Do(func() {
		probertBin = filepath.Join(filepath.Dir(bin), "probert")
		probertErr = testproc.Build(map[string]string{probertBin: "../../internal/probert"})
	})
	if probertErr != nil {
		t.Fatal(probertErr)
	}
	return probertBin
}

// trionyxWorkspace writes a TriOnyx workspace: files (path -> content; a
// path ending in / is a directory), readable by a sandbox's own uid.
// It returns the workspace and its definitions directory.
func trionyxWorkspace(t *testing.T, files map[string]string) (ws, defs string) {
	t.Helper()
	ws = t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(ws, name)
		dir := p
		if !strings.HasSuffix(name, "/") {
			dir = filepath.Dir(p)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if p != dir {
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ws, filepath.Join(ws, "agent-definitions")
}

// probeOutcome is one line of probert's log.
type probeOutcome struct {
	Op     string `json:"op"`
	Path   string `json:"path"`
	Target string `json:"target"`
	Data   string `json:"data"`
	OK     bool   `json:"ok"`
	Error  string `json:"error"`
	Status int    `json:"status"`
}

func readProbes(path string) ([]probeOutcome, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	var out []probeOutcome
	done := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o probeOutcome
		if json.Unmarshal(sc.Bytes(), &o) == nil {
			if o.Op == "done" {
				done = true
				continue
			}
			out = append(out, o)
		}
	}
	return out, done
}

// jsonYAML quotes v's JSON as a YAML single-quoted string.
func jsonYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return "'" + strings.ReplaceAll(string(b), "'", "''") + "'"
}

// TriOnyx definitions load only with --compat trionyx; their fs and
// network keys are the sandbox line; the keys bcpgw does not enforce are
// warned about once each.
func TestTriOnyxValidate(t *testing.T) {
	t.Parallel()
	defs := "../../agents/testdata/trionyx/workspace/agent-definitions"
	ws, err := filepath.Abs("../../agents/testdata/trionyx/workspace")
	if err != nil {
		t.Fatal(err)
	}

	r := run(t, runOpts{}, "validate", defs)
	if r.code != 1 || !strings.Contains(r.stderr, "main.md:7: fs_read: unknown field") || !strings.Contains(r.stderr, "researcher.md:12: bcp_channels[0].rates: unknown field") {
		t.Fatalf("without --compat the TriOnyx files must be refused\n%s", r)
	}

	r = run(t, runOpts{env: []string{"ANTHROPIC_API_KEY="}}, "validate", "--compat", "trionyx", "--default-runtime", "/usr/bin/env trionyx-runner", defs)
	if r.code != 0 {
		t.Fatalf("validate --compat trionyx\n%s", r)
	}
	for _, want := range []string{
		"valid: 3 agents, 1 channel, 2 subscriptions",
		fmt.Sprintf("sandbox: workdir %s/agents/main, read-only [%s/AGENTS.md], read-write [%s/obsidian/shared/wiki], network [api.anthropic.com:443] through the egress proxy", ws, ws, ws),
		fmt.Sprintf("sandbox: workdir %s/agents/researcher, read-only [%s/AGENTS.md], read-write [], network host", ws, ws),
		fmt.Sprintf("sandbox: workdir %s/agents/webhook, read-only [], read-write [%s/data/webhooks], network [api.github.com, hooks.slack.com:443, api.anthropic.com:443] through the egress proxy", ws, ws),
		"channel to researcher: controller, max category 2 (effective 2), budget unlimited (main), unlimited (researcher)",
		"rates: cat1 30/hour, cat2 5/minute, cat3 denied (main); cat1 60/hour, cat2 10/hour, cat3 denied (researcher)",
		"subscription findings  Cat-2      209.0 bits per push  3 questions",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q\n%s", want, r)
		}
	}
	for _, key := range []string{"main.md:12: send_to", "main.md:14: receive_from", "main.md:16: base_taint", "researcher.md:6: browser", "webhook.md:14: input_sources"} {
		if n := strings.Count(r.stderr, key+": accepted but not enforced by bcpgw"); n != 1 {
			t.Errorf("warning for %s given %d times, want once\n%s", key, n, r.stderr)
		}
	}
	for _, want := range []string{"main.md:24: bcp_channels[0]: no budget_bits: unlimited", "researcher.md:5: network: outbound is the host's network here",
		`researcher.md:16: bcp_channels[1].peer: no agent named "bookmarks"`} {
		if !strings.Contains(r.stderr, "warning: agent-definitions/"+want) && !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q\n%s", want, r.stderr)
		}
	}

	r = run(t, runOpts{}, "validate", "--json", "--compat", "trionyx", "--default-runtime", "/usr/bin/env", defs)
	var rep struct {
		Agents []struct {
			Name    string `json:"name"`
			Sandbox struct {
				ReadOnly  []string `json:"read_only"`
				ReadWrite []string `json:"read_write"`
				Network   string   `json:"network"`
				Allow     []string `json:"allow"`
			} `json:"sandbox"`
			Channels []struct {
				ControllerRates map[string]string `json:"controller_rates"`
				ReaderBudget    int64             `json:"reader_budget_bits"`
			} `json:"channels"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Agents) != 3 {
		t.Fatalf("validate --json: %v\n%s", err, r)
	}
	m := rep.Agents[0]
	if m.Name != "main" || m.Sandbox.Network != "proxy" || strings.Join(m.Sandbox.Allow, ",") != "api.anthropic.com:443" ||
		m.Channels[0].ControllerRates["cat2"] != "5/minute" || m.Channels[0].ControllerRates["cat3"] != "denied" || m.Channels[0].ReaderBudget != 1<<53 {
		t.Errorf("main in --json: %+v", m)
	}

	// The flags that only make sense with --compat are refused without it.
	if r := run(t, runOpts{}, "validate", "--default-runtime", "x", defs); r.code != 2 || !strings.Contains(r.stderr, "--default-runtime needs --compat trionyx") {
		t.Errorf("--default-runtime without --compat\n%s", r)
	}
	if r := run(t, runOpts{}, "validate", "--compat", "openclaw", defs); r.code != 2 || !strings.Contains(r.stderr, `unknown definition format "openclaw"`) {
		t.Errorf("--compat openclaw\n%s", r)
	}
}

// What cannot be translated is refused at file:line, by validate and run.
func TestTriOnyxUntranslatable(t *testing.T) {
	t.Parallel()
	_, defs := trionyxWorkspace(t, map[string]string{
		"src/": "",
		"agent-definitions/coder.md": `---
name: coder
tools: Read, Write
fs_read:
  - "/src/**/*.go"
fs_write:
  - "/src"
network: [api.github.com]
---
`,
	})
	want := []string{`coder.md:5: fs_read[0]: "/src/**/*.go" cannot be enforced exactly`, `coder.md:7: fs_write[0]: "/src" is a directory`,
		"coder.md:1: runtime: TriOnyx definitions name no runtime"}
	for _, args := range [][]string{
		{"validate", "--compat", "trionyx", defs},
		{"run", "--compat", "trionyx", "--agents", defs, "--state", opStateDir(t)},
	} {
		r := run(t, runOpts{env: opEnv}, args...)
		if r.code != 1 {
			t.Errorf("%s: want exit 1\n%s", args[0], r)
		}
		for _, w := range want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr lacks %q\n%s", args[0], w, r)
			}
		}
	}
}

// fs_read, fs_write and network are enforced in a real run: what a
// definition lists is visible (read-only or writable), nothing else is;
// network none still reaches only the model API, through the egress proxy.
func TestTriOnyxSandboxEnforced(t *testing.T) {
	t.Parallel()
	rt := probert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := ln.Addr().String()
	files := map[string]string{
		"AGENTS.md":          "shared rules\n",
		"secret/key.txt":     "do not read\n",
		"shared/notes/a.txt": "old note\n",
		"agent-definitions/": "",
	}
	ws, defs := trionyxWorkspace(t, files)
	at := func(p string) string { return filepath.Join(ws, p) }
	probes := []map[string]string{
		{"op": "read", "path": at("AGENTS.md")},
		{"op": "read", "path": at("secret/key.txt")},
		{"op": "list", "path": at("secret")},
		{"op": "write", "path": at("AGENTS.md"), "data": "overwritten"},
		{"op": "write", "path": at("shared/notes/b.txt"), "data": "new note"},
		{"op": "write", "path": at("drop/out.txt"), "data": "dropped"},
		{"op": "write", "path": at("agents/prober/own.txt"), "data": "mine"},
		{"op": "write", "path": at("secret/x.txt"), "data": "no"},
		{"op": "read", "path": at("agent-definitions/prober.md")},
		{"op": "connect", "target": target},
		{"op": "connect", "target": "example.org:443"},
	}
	files["agent-definitions/prober.md"] = fmt.Sprintf(`---
name: prober
description: tries what its sandbox allows
tools: Read, Write
autostart: true
network:
  - %q
fs_read:
  - "/AGENTS.md"
fs_write:
  - "/shared/notes/**"
  - "/drop/**"
skills: [research]
docker_socket: true
env:
  PROBERT_LOG: %q
  PROBERT_PROBES: %s
---
You probe.
`, target, at("agents/prober/probe.log"), jsonYAML(t, probes))
	files["agent-definitions/isolated.md"] = fmt.Sprintf(`---
name: isolated
tools: Read
autostart: true
network: none
env:
  PROBERT_LOG: %q
  PROBERT_PROBES: %s
---
`, at("agents/isolated/probe.log"), jsonYAML(t, []map[string]string{
		{"op": "connect", "target": target},
		{"op": "connect", "target": "api.anthropic.com:443"},
		{"op": "read", "path": at("AGENTS.md")},
	}))
	for _, name := range []string{"prober.md", "isolated.md"} {
		p := filepath.Join(defs, name)
		if err := os.WriteFile(p, []byte(files["agent-definitions/"+name]), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The sandbox line says what the run enforces.
	r := run(t, runOpts{}, "validate", "--compat", "trionyx", "--default-runtime", rt, defs)
	if r.code != 0 {
		t.Fatalf("validate\n%s", r)
	}
	for _, want := range []string{
		fmt.Sprintf("sandbox: workdir %s, read-only [%s], read-write [%s, %s], network [%s, api.anthropic.com:443] through the egress proxy",
			at("agents/prober"), at("AGENTS.md"), at("shared/notes"), at("drop"), target),
		fmt.Sprintf("sandbox: workdir %s, read-only [], read-write [], network [api.anthropic.com:443] through the egress proxy", at("agents/isolated")),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("validate lacks %q\n%s", want, r)
		}
	}
	for _, key := range []string{"skills", "docker_socket"} {
		if !strings.Contains(r.stderr, "prober.md:") || strings.Count(r.stderr, key+": accepted but not enforced by bcpgw") != 1 {
			t.Errorf("no single warning for %s\n%s", key, r.stderr)
		}
	}
	if _, err := os.Stat(at("drop")); err == nil {
		t.Fatal("validate created a directory")
	}

	g := &opGateway{t: t, state: opStateDir(t), agents: defs, runArgs: []string{"--compat", "trionyx", "--default-runtime", rt}}
	g.start("")
	var prober, isolated []probeOutcome
	opWait(t, "both agents to run their probes", func() (bool, string) {
		var ok1, ok2 bool
		prober, ok1 = readProbes(at("agents/prober/probe.log"))
		isolated, ok2 = readProbes(at("agents/isolated/probe.log"))
		return ok1 && ok2, g.stderr.String()
	})
	// Each refused proxy connection is an event too, stored in the
	// background: the probe may have logged its refusal before.
	refused := 0
	opWait(t, "the egress_refused event of isolated", func() (bool, string) {
		refused = 0
		for _, e := range g.events("--type", "egress_refused") {
			if e.Agent == "isolated" && strings.Contains(e.Detail, target) {
				refused++
			}
		}
		return refused >= 1, g.stderr.String()
	})
	if refused != 1 {
		t.Errorf("%d egress_refused events of isolated for %s, want 1", refused, target)
	}
	g.stop()

	check := func(o probeOutcome, ok bool, errPart string) {
		t.Helper()
		if o.OK != ok || !strings.Contains(o.Error, errPart) {
			t.Errorf("%s %s%s: ok=%v error=%q, want ok=%v error containing %q", o.Op, o.Path, o.Target, o.OK, o.Error, ok, errPart)
		}
	}
	if len(prober) != len(probes) || len(isolated) != 3 {
		t.Fatalf("probes: %+v / %+v", prober, isolated)
	}
	check(prober[0], true, "") // fs_read: visible
	if prober[0].Data != "shared rules\n" {
		t.Errorf("AGENTS.md read as %q", prober[0].Data)
	}
	check(prober[1], false, "no such file or directory") // not listed: not there at all
	check(prober[2], false, "no such file or directory")
	check(prober[3], false, "read-only file system")     // fs_read is read-only
	check(prober[4], true, "")                           // fs_write DIR/**
	check(prober[5], true, "")                           // created by bcpgw run
	check(prober[6], true, "")                           // its own /agents/NAME
	check(prober[7], false, "no such file or directory") // nothing else is writable
	check(prober[8], false, "no such file or directory") // the definitions are never visible
	check(prober[9], true, "")                           // a listed host
	if prober[9].Status != 200 {
		t.Errorf("CONNECT to a listed host: status %d", prober[9].Status)
	}
	check(prober[10], false, "proxy: 403")  // an unlisted one
	check(isolated[0], false, "proxy: 403") // network: none ...
	if isolated[1].Status == 403 {
		t.Errorf("network: none refused the model API: %+v", isolated[1]) // ... but the model API is allowed (it may not be reachable from here)
	}
	check(isolated[2], false, "no such file or directory") // no fs_read: not visible

	for p, want := range map[string]string{"shared/notes/b.txt": "new note", "drop/out.txt": "dropped", "agents/prober/own.txt": "mine", "AGENTS.md": "shared rules\n"} {
		if b, err := os.ReadFile(at(p)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Stat(at("secret/x.txt")); err == nil {
		t.Error("secret/x.txt was written")
	}
}

// Channel rates are enforced by the gateway: queries and pushes of a
// category share the channel's count, a denied category is refused, each
// refusal is audited with its code and charges nothing.
func TestTriOnyxRateLimits(t *testing.T) {
	t.Parallel()
	ws, defs := trionyxWorkspace(t, map[string]string{"agent-definitions/": ""})
	at := func(p string) string { return filepath.Join(ws, p) }
	queries := []map[string]any{
		{"request_id": "r-cat2", "to": "researcher", "category": 2, "spec": map[string]any{"questions": []map[string]any{{"id": "topic", "question": "Topic?", "max_words": 3}}}},
		{"request_id": "r-cat1", "to": "researcher", "category": 1, "spec": map[string]any{"fields": []map[string]any{{"name": "ok", "type": "boolean"}}}},
	}
	publishes := []map[string]any{{"subscription_id": "findings", "controller": "main", "response": map[string]string{"topic": "item {i}"}, "repeat": 3}}
	for name, content := range map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
tools: BCPQuery
runtime_dialect: bcpgw
env:
  TESTRT_LOG: %q
  TESTRT_QUERIES: %s
bcp_channels:
  - peer: researcher
    role: controller
    rates:
      cat1: 0
      cat2: 2/hour
      cat3: 0
    subscriptions:
      - id: findings
        category: 2
        questions:
          - {name: topic, format: short_text, max_words: 3}
---
`, at("agents/main/testrt.log"), jsonYAML(t, queries)),
		"researcher.md": fmt.Sprintf(`---
name: researcher
tools: BCPPublish, BCPRespond
autostart: true
runtime_dialect: bcpgw
env:
  TESTRT_LOG: %q
  TESTRT_PUBLISH: %s
  TESTRT_SILENT: "1"
bcp_channels:
  - {peer: main, role: reader, rates: {cat1: 10/hour, cat2: 10/hour}}
---
`, at("agents/researcher/testrt.log"), jsonYAML(t, publishes)),
	} {
		if err := os.WriteFile(filepath.Join(defs, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &opGateway{t: t, state: opStateDir(t), agents: defs, runArgs: []string{"--compat", "trionyx", "--default-runtime", testrt}}
	g.start("")
	defer g.stop()

	type rec struct {
		Event     string `json:"event"`
		Success   bool   `json:"success"`
		Detail    string `json:"detail"`
		RequestID string `json:"request_id"`
		Index     int    `json:"index"`
	}
	readLog := func(path string) []rec {
		b, _ := os.ReadFile(path)
		var out []rec
		for line := range strings.Lines(string(b)) {
			var r rec
			if json.Unmarshal([]byte(line), &r) == nil {
				out = append(out, r)
			}
		}
		return out
	}
	var verdicts []rec
	opWait(t, "three verdicts on the researcher's pushes", func() (bool, string) {
		verdicts = verdicts[:0]
		for _, r := range readLog(at("agents/researcher/testrt.log")) {
			if r.Event == "verdict" {
				verdicts = append(verdicts, r)
			}
		}
		return len(verdicts) == 3, g.stderr.String()
	})
	if !verdicts[0].Success || !verdicts[1].Success || verdicts[2].Success ||
		!strings.HasPrefix(verdicts[2].Detail, "rate_limited: Cat-2 rate limit reached on the channel between 'main' and 'researcher': 2/hour in main's rates") {
		t.Fatalf("verdicts: %+v", verdicts)
	}

	// The pushes used main's Cat-2 window: a Cat-2 query is refused too;
	// Cat-1 is denied by main's rates.
	g.ok("prompt", "main", "query")
	outcomes := func(n int) map[string][]string {
		var out map[string][]string
		opWait(t, fmt.Sprintf("%d query outcomes in main's log", n), func() (bool, string) {
			out = map[string][]string{}
			count := 0
			for _, r := range readLog(at("agents/main/testrt.log")) {
				if r.Event == "query_error" || r.Event == "query_sent" {
					out[r.RequestID] = append(out[r.RequestID], r.Event+" "+r.Detail)
					count++
				}
			}
			return count == n, fmt.Sprint(out)
		})
		return out
	}
	got := outcomes(2)
	if !strings.Contains(got["r-cat2"][0], "query_error query refused: rate_limited: Cat-2 rate limit reached") ||
		!strings.Contains(got["r-cat1"][0], "query_error query refused: category_not_allowed: Cat-1 is denied on the channel between 'main' and 'researcher': rates.cat1 is 0 in main's definition") {
		t.Errorf("query outcomes: %q", got)
	}

	// A reload reads the definitions as TriOnyx's too; the new rates
	// apply at once, to the messages already counted.
	b, err := os.ReadFile(filepath.Join(defs, "main.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(defs, "main.md"), []byte(strings.Replace(string(b), "cat2: 2/hour", "cat2: 3/hour", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := g.bcpgw("reload"); r.code != 0 {
		t.Fatalf("reload of TriOnyx definitions\n%s\n%s", r, g.stderr.String())
	}
	opWait(t, "main's new rates in force", func() (bool, string) {
		r := g.bcpgw("events", "--type", "reload_ok", "--json")
		return strings.Contains(r.stdout, "main"), r.String()
	})
	g.ok("prompt", "main", "query")
	got = outcomes(4)
	if len(got["r-cat2"]) != 2 || !strings.HasPrefix(got["r-cat2"][1], "query_sent") || !strings.Contains(got["r-cat1"][1], "category_not_allowed") {
		t.Errorf("after raising cat2 to 3/hour: %q", got)
	}

	// Audited with their codes; nothing refused was charged. The events
	// are stored in the background: main may have logged the outcomes
	// before.
	codes := map[string]int{}
	opWait(t, "the refusals and the query to be audited", func() (bool, string) {
		codes = map[string]int{}
		for _, e := range g.events("--type", "refused") {
			codes[e.Agent+" "+e.Code]++
		}
		return codes["researcher rate_limited"] >= 1 && codes["main rate_limited"] >= 1 && codes["main category_not_allowed"] >= 2 &&
			len(g.events("--type", "query_sent")) >= 1, fmt.Sprint(codes)
	})
	if codes["researcher rate_limited"] != 1 || codes["main rate_limited"] != 1 || codes["main category_not_allowed"] != 2 {
		t.Errorf("refused events by agent and code: %v", codes)
	}
	if n := len(g.events("--type", "publish_accepted")); n != 2 {
		t.Errorf("%d publish_accepted events, want 2", n)
	}
	if n := len(g.events("--type", "query_sent")); n != 1 {
		t.Errorf("%d query_sent events, want 1 (after the reload)", n)
	}
}

// bcpgw check --compat trionyx refuses a push whose category the rates
// deny, as the gateway does, and takes TriOnyx's spellings.
func TestTriOnyxCheck(t *testing.T) {
	t.Parallel()
	_, defs := trionyxWorkspace(t, map[string]string{
		"agent-definitions/boss.md": `---
name: boss
tools: BCPQuery
bcp_channels:
  - peer: scout
    role: controller
    rates: {cat1: 0, cat2: 5/hour}
    subscriptions:
      - id: flags
        category: 1
        fields: [{name: level, type: enum, options: [low, high]}]
      - id: notes
        category: 2
        questions: [{name: who, format: person_name, max_words: 3}]
---
`,
		"agent-definitions/scout.md": `---
name: scout
tools: BCPPublish
bcp_channels:
  - {peer: boss, role: reader, rates: {cat1: 10/hour, cat2: 10/hour}}
---
`,
	})
	base := []string{"check", "--compat", "trionyx", "--default-runtime", "/bin/true", "--agents", defs, "--controller", "boss", "--reader", "scout"}
	r := run(t, runOpts{}, append(base, "--subscription", "flags", "--response", `{"level":"high"}`)...)
	v := parseVerdict(t, r.stdout)
	if r.code != 1 || v.Code != "category_not_allowed" || !strings.Contains(v.Detail, "rates.cat1 is 0 in boss's definition") {
		t.Errorf("a denied category\n%s", r)
	}
	r = run(t, runOpts{}, append(base, "--subscription", "notes", "--response", `{"who":"Ada Lovelace"}`)...)
	if v := parseVerdict(t, r.stdout); r.code != 0 || !v.Accepted {
		t.Errorf("an allowed Cat-2 push\n%s", r)
	}
	r = run(t, runOpts{}, append(base, "--subscription", "notes", "--response", `{"who":"R2-D2 #42!"}`)...)
	if v := parseVerdict(t, r.stdout); r.code != 1 || v.Code != "validation_failed" {
		t.Errorf("TriOnyx's format: person_name is validated\n%s", r)
	}
}
