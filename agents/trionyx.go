package agents

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
	"github.com/bcpgw/bcpgw/internal/yamlnode"
)

// Compat names a definition format other than bcpgw's own.
type Compat string

// The formats Load reads.
const (
	// CompatNone is bcpgw's own format, strict (PROTOCOL.md section 2).
	CompatNone Compat = ""
	// CompatTriOnyx reads the agent definitions of TriOnyx, the Elixir
	// gateway the protocol comes from (bcpgw --compat trionyx): its keys
	// are translated into the Definition bcpgw runs, its security keys
	// enforced, and the rest accepted with a warning. See README, "Coming
	// from TriOnyx".
	CompatTriOnyx Compat = "trionyx"
)

// ParseCompat reads a --compat value: "" or "none" for bcpgw's own
// format, "trionyx" for TriOnyx's.
func ParseCompat(s string) (Compat, error) {
	switch s {
	case "", "none", "bcpgw":
		return CompatNone, nil
	case string(CompatTriOnyx):
		return CompatTriOnyx, nil
	}
	return "", fmt.Errorf("unknown definition format %q (known: trionyx)", s)
}

// TriOnyxModelAPI is the destination TriOnyx always lets a runtime reach,
// whatever its network key says: the Anthropic API its runtime (Claude
// Code) calls for the model. A definition whose env sets
// ANTHROPIC_BASE_URL has that URL's host and port instead.
const TriOnyxModelAPI = "api.anthropic.com:443"

// TriOnyxDefaultModel is TriOnyx's model for a definition that names none.
const TriOnyxDefaultModel = "claude-sonnet-4-20250514"

// triOnyxQuestionWords is TriOnyx's max_words of a Cat-2 question that
// sets none (it does not inherit the subscription's).
const triOnyxQuestionWords = 10

// triOnyxPassthrough are the variables TriOnyx passes from its own
// environment to every agent, when set: the model's credentials.
var triOnyxPassthrough = []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"}

// heartbeatMessage is the prompt of a heartbeat_every schedule.
const heartbeatMessage = "Heartbeat: look over your current state and notes. " +
	"If nothing needs attention, answer HEARTBEAT_OK; otherwise say what needs doing and do it."

// triOnyxUnenforced are the TriOnyx keys bcpgw accepts but does not
// enforce, each with what that means here and how it is checked (as
// TriOnyx checks it, so that a file TriOnyx refuses is refused here too).
var triOnyxUnenforced = map[string]struct {
	kind string // "list", "bool", "taint", "cron"
	why  string
}{
	"send_to":                      {"list", "SendMessage between agents is not a bcpgw feature: agents talk only through BCP channels"},
	"receive_from":                 {"list", "SendMessage between agents is not a bcpgw feature: agents talk only through BCP channels"},
	"restart_targets":              {"list", "the RestartAgent tool is not a bcpgw feature"},
	"skills":                       {"list", "skill files are not mounted; list their directory in fs_read if the runtime needs them"},
	"plugins":                      {"list", "plugin directories are not mounted nor their dependencies installed; list what the runtime needs in fs_read/fs_write"},
	"input_sources":                {"list", "bcpgw has no taint tracking; Reader and Controller roles on BCP channels separate untrusted input"},
	"base_taint":                   {"taint", "bcpgw has no taint tracking; Reader and Controller roles on BCP channels separate untrusted input"},
	"browser":                      {"bool", "no browser sessions or browser tooling are provided"},
	"docker_socket":                {"bool", "no Docker socket proxy is provided"},
	"trionyx_repo":                 {"bool", "the TriOnyx repository is not mounted"},
	"exclude_from_personalization": {"bool", "bcpgw builds no user profile"},
	"reflection":                   {"cron", "no reflection runs are scheduled; use cron_schedules for a scheduled prompt"},
}

var (
	triOnyxRate     = regexp.MustCompile(`^(\d+)/(second|minute|hour)$`)
	triOnyxDuration = regexp.MustCompile(`^(\d+)(s|m|h)$`)
	envRefPattern   = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
)

// parseFile parses one file in the set's format, adding the file's
// warnings (TriOnyx keys not enforced, defaults taken) to the set.
func (s *Set) parseFile(path string, data []byte) (*Definition, []*ParseError) {
	if s.opts.Compat != CompatTriOnyx {
		return parseFile(path, data)
	}
	t := &triOnyx{opts: s.opts, agentsDir: absDir(s.Dir)}
	t.workspace = t.opts.Workspace
	if t.workspace == "" {
		t.workspace = filepath.Dir(t.agentsDir)
	}
	t.workspace = absDir(t.workspace)
	if t.opts.LookupEnv == nil {
		t.opts.LookupEnv = os.LookupEnv
	}
	d := &decoder{file: path, offset: 1, lines: lineIndex{}}
	def := t.parse(d, data)
	if def != nil && len(d.errs) > 0 {
		def.broken = true
	}
	s.Warnings = append(s.Warnings, t.warnings...)
	if def != nil {
		s.makeDirs = append(s.makeDirs, t.makeDirs...)
	}
	return def, d.errs
}

// triOnyx translates one TriOnyx definition.
type triOnyx struct {
	opts      LoadOptions
	agentsDir string
	workspace string
	d         *decoder
	warnings  []*Warning
	makeDirs  []pendingDir
}

// pendingDir is a directory a TriOnyx agent may write that does not exist
// yet: created under LoadOptions.MakeDirs once the set is valid.
type pendingDir struct {
	def *Definition
	at  string // field path
	dir string
}

func (t *triOnyx) warn(path, format string, args ...any) {
	t.warnings = append(t.warnings, &Warning{File: t.d.file, Line: t.d.lines.line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// parse reads the frontmatter as parse does, then TriOnyx's keys.
func (t *triOnyx) parse(d *decoder, data []byte) *Definition {
	t.d = d
	root, body := d.frontmatter(data, "name and tools")
	if root == nil {
		return nil
	}
	def := &Definition{
		File:        d.file,
		IdleTimeout: DefaultIdleTimeout,
		Model:       TriOnyxDefaultModel,
		// TriOnyx's own runtime, unless runtime_dialect says otherwise.
		Dialect:      DialectTriOnyx,
		SystemPrompt: body,
		lines:        d.lines,
	}
	var network, fsRead, fsWrite, heartbeat *yaml.Node
	fs := fields{
		"name": func(n *yaml.Node, p string) {
			if s, ok := d.str(n, p); ok {
				if !agentName.MatchString(s) {
					d.fail(n, p, "%q is not a valid agent name (lower-case letters, digits, _ and -, starting with a letter or digit)", s)
				}
				def.Name = s
			}
		},
		"description": func(n *yaml.Node, p string) {
			if n.Tag != "!!null" {
				def.Description, _ = d.str(n, p)
			}
		},
		"model": func(n *yaml.Node, p string) { def.Model, _ = d.nonEmpty(n, p) },
		"tools": func(n *yaml.Node, p string) {
			tools, ok := d.list(n, p, splitComma)
			if ok && len(tools) == 0 {
				d.fail(n, p, "must list at least one tool")
			}
			def.Tools = tools
		},
		"network":         func(n *yaml.Node, p string) { network = n },
		"fs_read":         func(n *yaml.Node, p string) { fsRead = n },
		"fs_write":        func(n *yaml.Node, p string) { fsWrite = n },
		"heartbeat_every": func(n *yaml.Node, p string) { heartbeat = n },
		"idle_timeout": func(n *yaml.Node, p string) {
			if v, ok := t.duration(n, p); ok {
				def.IdleTimeout = v
			}
		},
		"bcp_channels": func(n *yaml.Node, p string) {
			i := 0
			d.sequence(n, p, func(item *yaml.Node, ip string) {
				if c := t.channel(item, ip, i); c != nil {
					def.Channels = append(def.Channels, c)
				}
				i++
			})
		},
		"cron_schedules": func(n *yaml.Node, p string) {
			d.sequence(n, p, func(item *yaml.Node, ip string) {
				if c, ok := d.cron(item, ip); ok {
					def.CronSchedules = append(def.CronSchedules, c)
				}
			})
		},
		// bcpgw's keys that TriOnyx has no word for.
		"runtime": func(n *yaml.Node, p string) {
			argv, ok := d.list(n, p, strings.Fields)
			if ok && (len(argv) == 0 || argv[0] == "") {
				d.fail(n, p, "must name the runtime program")
			}
			def.Runtime = argv
		},
		"env":             func(n *yaml.Node, p string) { def.Env = d.env(n, p) },
		"autostart":       func(n *yaml.Node, p string) { def.Autostart, _ = d.boolean(n, p) },
		"max_turns":       func(n *yaml.Node, p string) { def.MaxTurns, _ = d.atLeast(n, p, 0) },
		"runtime_dialect": func(n *yaml.Node, p string) { d.dialect(n, p, def) },
		"flood_limit":     func(n *yaml.Node, p string) { d.floodLimit(n, p, def) },
		"turn_timeout":    func(n *yaml.Node, p string) { d.turnTimeout(n, p, def) },
		// bcpgw's keys that TriOnyx's say otherwise.
		"sandbox": func(n *yaml.Node, p string) {
			d.fail(n, p, "not used with --compat trionyx: fs_read, fs_write and network say what the sandbox allows")
		},
		"workdir": func(n *yaml.Node, p string) {
			d.fail(n, p, "not used with --compat trionyx: the workdir is the agent's own WORKSPACE/agents/NAME, as in TriOnyx")
		},
	}
	for key, u := range triOnyxUnenforced {
		fs[key] = func(n *yaml.Node, p string) {
			if t.unenforced(n, p, u.kind) {
				t.warn(p, "accepted but not enforced by bcpgw: %s", u.why)
			}
		}
	}
	d.mapping(root, "", fs)
	if def.Name == "" && !d.has("name") {
		d.errorf(1, "name", "required")
	}
	if def.Tools == nil && !d.has("tools") {
		d.errorf(1, "tools", "required (TriOnyx requires it): the tools the runtime may offer, e.g. Read, Write, BCPQuery")
	}
	if def.Runtime == nil && !d.has("runtime") {
		if len(t.opts.DefaultRuntime) == 0 {
			d.errorf(1, "runtime", "TriOnyx definitions name no runtime: give bcpgw --default-runtime 'PROGRAM ARGS...' or add runtime: [PROGRAM, ARGS...]")
		} else {
			def.Runtime = slices.Clone(t.opts.DefaultRuntime)
		}
	}
	if def.Name != "" && agentName.MatchString(def.Name) {
		// TriOnyx's default writable path, /agents/NAME/**, is its
		// workdir here. It is not "workdir" of the file: the path rules
		// report it at the name.
		def.Workdir = filepath.Join(t.workspace, "agents", def.Name)
		d.lines["workdir"] = d.lines.line("name")
		if _, err := os.Stat(def.Workdir); err != nil {
			t.makeDirs = append(t.makeDirs, pendingDir{def: def, at: "workdir", dir: def.Workdir})
		}
	}
	for _, k := range triOnyxPassthrough {
		if _, set := def.Env[k]; set {
			continue
		}
		if _, ok := t.opts.LookupEnv(k); ok {
			if def.Env == nil {
				def.Env = map[string]string{}
			}
			def.Env[k] = "${" + k + "}"
		}
	}
	if heartbeat != nil {
		t.heartbeat(heartbeat, "heartbeat_every", def)
	}
	def.Sandbox.Network = t.network(network, "network", def)
	t.paths(fsRead, fsWrite, def)
	d.checkChannels(def)
	return def
}

// unenforced checks the value of a key bcpgw does not enforce as TriOnyx
// does, and reports whether it is well-formed.
func (t *triOnyx) unenforced(n *yaml.Node, p, kind string) bool {
	d := t.d
	if n.Tag == "!!null" {
		return true // TriOnyx reads a key without a value as absent
	}
	switch kind {
	case "list":
		if n.Kind != yaml.SequenceNode {
			d.fail(n, p, "must be a list, got %s", yamlnode.Describe(n))
			return false
		}
		_, ok := d.list(n, p, nil)
		return ok
	case "bool":
		_, ok := d.boolean(n, p)
		return ok
	case "taint":
		s, ok := d.str(n, p)
		if ok && s != "low" && s != "medium" && s != "high" {
			d.fail(n, p, "must be low, medium or high, got %q", s)
			return false
		}
		return ok
	case "cron":
		s, ok := d.str(n, p)
		if ok {
			if err := checkSchedule(s); err != nil {
				d.fail(n, p, "%q is not a cron schedule: %v", s, err)
				return false
			}
		}
		return ok
	}
	return true
}

// duration reads a TriOnyx duration: "30s", "5m", "1h", or an integer of
// milliseconds.
func (t *triOnyx) duration(n *yaml.Node, p string) (time.Duration, bool) {
	d := t.d
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		ms, ok := d.integer(n, p)
		if !ok {
			return 0, false
		}
		if ms <= 0 || ms > int64(1<<62/time.Millisecond) {
			d.fail(n, p, "must be a positive number of milliseconds, got %d", ms)
			return 0, false
		}
		return time.Duration(ms) * time.Millisecond, true
	}
	s, ok := d.str(n, p)
	if !ok {
		return 0, false
	}
	m := triOnyxDuration.FindStringSubmatch(s)
	if m == nil {
		d.fail(n, p, "%q is not a duration: write 30s, 5m or 1h (or milliseconds as an integer)", s)
		return 0, false
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	if err != nil || v > int64(1<<62/unit) {
		d.fail(n, p, "%q is too long", s)
		return 0, false
	}
	return time.Duration(v) * unit, true
}

// heartbeat turns heartbeat_every into a cron schedule.
func (t *triOnyx) heartbeat(n *yaml.Node, p string, def *Definition) {
	if n.Tag == "!!null" {
		return
	}
	every, ok := t.duration(n, p)
	if !ok {
		return
	}
	sched := "@every " + every.String()
	if err := checkSchedule(sched); err != nil {
		t.d.fail(n, p, "%v", err)
		return
	}
	def.CronSchedules = append(def.CronSchedules, CronSchedule{Schedule: sched, Message: heartbeatMessage, Label: "heartbeat"})
}

// network translates TriOnyx's network key. TriOnyx always lets a runtime
// reach the model API, so none and a list of hosts become the egress
// proxy with the model API (and the hosts); outbound becomes the host's
// network.
func (t *triOnyx) network(n *yaml.Node, p string, def *Definition) Network {
	d := t.d
	var allow []netpolicy.Destination
	add := func(dest netpolicy.Destination) {
		if !slices.ContainsFunc(allow, func(x netpolicy.Destination) bool { return x.String() == dest.String() }) {
			allow = append(allow, dest)
		}
	}
	if n != nil && n.Tag != "!!null" {
		switch n.Kind {
		case yaml.ScalarNode:
			s, _ := d.str(n, p)
			switch s {
			case "none":
			case "outbound":
				t.warn(p, "outbound is the host's network here (network: host, the host's loopback services included), "+
					"not only outbound connections as in TriOnyx's container: list the hosts the runtime needs for a tighter sandbox")
				return Network{Mode: NetworkHost}
			default:
				d.fail(n, p, "must be none, outbound or a list of hosts, got %q", s)
				return Network{Mode: NetworkNone}
			}
		case yaml.SequenceNode:
			d.sequence(n, p, func(item *yaml.Node, ip string) {
				s, ok := d.str(item, ip)
				if !ok {
					return
				}
				dest, err := netpolicy.Parse(s)
				if err != nil {
					d.fail(item, ip, "%v", err)
					return
				}
				add(dest)
			})
		default:
			d.fail(n, p, "must be none, outbound or a list of hosts, got %s", yamlnode.Describe(n))
			return Network{Mode: NetworkNone}
		}
	}
	if api, ok := t.modelAPI(def); ok {
		add(api)
	}
	return Network{Mode: NetworkProxy, Allow: allow}
}

// modelAPI is the destination of the model API: ANTHROPIC_BASE_URL's host
// and port when the definition's env sets it, else TriOnyxModelAPI.
func (t *triOnyx) modelAPI(def *Definition) (netpolicy.Destination, bool) {
	raw, set := def.Env["ANTHROPIC_BASE_URL"]
	if !set {
		dest, _ := netpolicy.Parse(TriOnyxModelAPI)
		return dest, true
	}
	const at = "env.ANTHROPIC_BASE_URL"
	var missing []string
	val := envRefPattern.ReplaceAllStringFunc(raw, func(ref string) string {
		name := envRefPattern.FindStringSubmatch(ref)[1]
		v, ok := t.opts.LookupEnv(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	line := t.d.lines.line(at)
	if len(missing) > 0 {
		t.d.errorf(line, at, "${%s} is not set: the model API's address must be known to allow it in the sandbox", strings.Join(missing, "}, ${"))
		return netpolicy.Destination{}, false
	}
	u, err := url.Parse(val)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		t.d.errorf(line, at, "%q is not an http(s) URL: the model API's address must be known to allow it in the sandbox", val)
		return netpolicy.Destination{}, false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	dest, err := netpolicy.Parse(net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		t.d.errorf(line, at, "model API: %v", err)
		return netpolicy.Destination{}, false
	}
	return dest, true
}

// fsPattern is one fs_read or fs_write pattern, translated.
type fsPattern struct {
	at   string // field path, e.g. fs_write[1]
	line int
	dir  string // on the host
	tree bool   // DIR/** or DIR/**/*: the whole directory
}

// patterns decodes fs_read or fs_write. TriOnyx's patterns are globs
// against the workspace; a sandbox shows whole files and directories, so
// a literal path and DIR/** (or DIR/**/*) translate exactly, and any other
// glob is an error rather than something wider or narrower than written.
func (t *triOnyx) patterns(n *yaml.Node, p string) []fsPattern {
	d := t.d
	if n == nil || n.Tag == "!!null" {
		return nil
	}
	var out []fsPattern
	d.sequence(n, p, func(item *yaml.Node, ip string) {
		s, ok := d.str(item, ip)
		if !ok {
			return
		}
		pat := strings.TrimSpace(s)
		if pat == "" || strings.ContainsRune(pat, 0) {
			d.fail(item, ip, "must be a path in the workspace, e.g. /agents/NAME/notes/**")
			return
		}
		if !strings.HasPrefix(pat, "/") {
			pat = "/" + pat // as TriOnyx reads it
		}
		tree := false
		for _, suffix := range []string{"/**/*", "/**"} {
			if rest, cut := strings.CutSuffix(pat, suffix); cut {
				pat, tree = rest, true
				break
			}
		}
		if strings.ContainsAny(pat, "*?[{") {
			d.fail(item, ip, "%q cannot be enforced exactly: a bcpgw sandbox shows whole files and directories, not what a glob matches; "+
				"write a file, or DIR/** for all of a directory (the runtime then sees all of it)", s)
			return
		}
		host := filepath.Join(t.workspace, filepath.Clean("/"+pat))
		if !tree {
			if fi, err := os.Stat(host); err == nil && fi.IsDir() {
				d.fail(item, ip, "%q is a directory: TriOnyx grants the directory itself, not its contents; write %s/** for all of it", s, strings.TrimSuffix(pat, "/"))
				return
			}
		}
		out = append(out, fsPattern{at: ip, line: item.Line + d.offset, dir: host, tree: tree})
	})
	return out
}

// paths translates fs_read and fs_write into sandbox paths. TriOnyx lets
// an agent write /agents/NAME/** (its workdir here) and read what it may
// write; paths already covered are left out, paths that do not exist are
// left out with a warning (a writable DIR/** is created by bcpgw run).
func (t *triOnyx) paths(fsRead, fsWrite *yaml.Node, def *Definition) {
	reads := t.patterns(fsRead, "fs_read")
	writes := t.patterns(fsWrite, "fs_write")
	within := func(p string, dirs []string) bool { // p is one of dirs or inside one
		for _, dir := range dirs {
			if rel := relation(p, dir); dir != "" && (rel == "is" || rel == "is inside") {
				return true
			}
		}
		return false
	}
	writable := []string{def.Workdir}
	for _, w := range writes {
		if within(w.dir, writable) {
			continue // the agent's own directory, or listed twice
		}
		if _, err := os.Stat(w.dir); err != nil {
			if !w.tree {
				t.warn(w.at, "%s does not exist: left out of the sandbox (create it, then reload, for the runtime to write it)", w.dir)
				continue
			}
			t.makeDirs = append(t.makeDirs, pendingDir{def: def, at: w.at, dir: w.dir})
			t.warn(w.at, "%s does not exist yet: bcpgw run creates it", w.dir)
		}
		writable = append(writable, w.dir)
		def.Sandbox.ReadWrite = append(def.Sandbox.ReadWrite, w.dir)
		def.readWriteAt = append(def.readWriteAt, w.at)
	}
	var readable []string
	for _, r := range reads {
		if within(r.dir, writable) || slices.Contains(readable, r.dir) {
			continue // writable implies readable
		}
		if _, err := os.Stat(r.dir); err != nil {
			t.warn(r.at, "%s does not exist: left out of the sandbox (create it, then reload, for the runtime to see it)", r.dir)
			continue
		}
		readable = append(readable, r.dir)
		def.Sandbox.ReadOnly = append(def.Sandbox.ReadOnly, r.dir)
		def.readOnlyAt = append(def.readOnlyAt, r.at)
	}
}

// channel decodes one of TriOnyx's bcp_channels: peer, role, rates (which
// supply max_category) and subscriptions; budget_bits and the query
// counters are bcpgw's, optional here.
func (t *triOnyx) channel(n *yaml.Node, path string, idx int) *Channel {
	d := t.d
	c := &Channel{index: idx, BudgetBits: UnlimitedBudget, MaxCat2Queries: UnlimitedQueries, MaxCat3Queries: UnlimitedQueries}
	var subs, rates *yaml.Node
	fs := d.channelFields(c)
	maps.Copy(fs, fields{
		"rates":         func(n *yaml.Node, p string) { rates = n },
		"subscriptions": func(n *yaml.Node, p string) { subs = n },
		"budget_bits": func(n *yaml.Node, p string) {
			if v, good := d.integer(n, p); good {
				if v <= 0 {
					d.fail(n, p, "must be > 0, got %d", v)
					return
				}
				c.BudgetBits = min(v, UnlimitedBudget)
			}
		},
		"max_category": func(n *yaml.Node, p string) {
			d.fail(n, p, "not used with --compat trionyx: the highest category rates does not deny is the channel's max_category")
		},
	})
	if !d.mapping(n, path, fs) {
		return nil
	}
	for _, key := range []string{"peer", "role", "rates"} {
		if !d.has(join(path, key)) {
			d.fail(n, join(path, key), "required")
		}
	}
	if rates != nil {
		c.Rates = t.rates(rates, join(path, "rates"))
		if c.Rates != nil {
			c.MaxCategory = c.Rates.MaxCategory()
		}
	}
	d.subscriptions(subs, join(path, "subscriptions"), c, triOnyxQuestions)
	return c
}

// rates decodes a channel's rates: cat1, cat2, cat3, each 0 (denied, also
// when absent), a count per hour, or "N/second", "N/minute", "N/hour".
func (t *triOnyx) rates(n *yaml.Node, path string) *Rates {
	d := t.d
	r := &Rates{}
	rate := func(dst *Rate) func(n *yaml.Node, p string) {
		return func(n *yaml.Node, p string) {
			var count int64
			window := time.Hour
			switch {
			case n.Kind == yaml.ScalarNode && n.Tag == "!!int":
				v, ok := d.integer(n, p)
				if !ok {
					return
				}
				count = v
			case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
				m := triOnyxRate.FindStringSubmatch(n.Value)
				if m == nil {
					d.fail(n, p, "%q is not a rate: write 0 (denied), N (per hour), or N/second, N/minute, N/hour", n.Value)
					return
				}
				v, err := strconv.ParseInt(m[1], 10, 64)
				if err != nil {
					v = MaxRateLimit + 1
				}
				count = v
				window = map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour}[m[2]]
			default:
				d.fail(n, p, "must be 0, N (per hour), or N/second, N/minute, N/hour, got %s", yamlnode.Describe(n))
				return
			}
			switch {
			case count < 0:
				d.fail(n, p, "must not be negative, got %d", count)
			case count > MaxRateLimit:
				d.fail(n, p, "at most %d per window (the gateway remembers each message within the window)", MaxRateLimit)
			case count == 0:
				*dst = Rate{} // denied, whatever the window
			default:
				*dst = Rate{Limit: int(count), Window: window}
			}
		}
	}
	if !d.mapping(n, path, fields{"cat1": rate(&r.Cat1), "cat2": rate(&r.Cat2), "cat3": rate(&r.Cat3)}) {
		return nil
	}
	if r.MaxCategory() == 0 && !d.failed(join(path, "cat1")) && !d.failed(join(path, "cat2")) && !d.failed(join(path, "cat3")) {
		d.fail(n, path, "every category is 0 (denied): the channel would carry nothing")
	}
	return r
}

// triOnyxQuestions gives each Cat-2 question of a subscription that sets
// no max_words TriOnyx's 10 (TriOnyx does not let it inherit the
// subscription's), in place; line numbers stay as written. Both spellings
// of a question ({id, question, expected_format} and TriOnyx's {name,
// format}) and of enum choices (values, options) are bcpgw's own.
func triOnyxQuestions(sub *yaml.Node) {
	if sub.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(sub.Content); i += 2 {
		if sub.Content[i].Value != "questions" || sub.Content[i+1].Kind != yaml.SequenceNode {
			continue
		}
		for _, q := range sub.Content[i+1].Content {
			if q.Kind == yaml.MappingNode && lookupKey(q, "max_words") == nil {
				q.Content = append(q.Content,
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "max_words", Line: q.Line, Column: q.Column},
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(triOnyxQuestionWords), Line: q.Line, Column: q.Column})
			}
		}
	}
}

// lookupKey returns the value of key in mapping m, or nil.
func lookupKey(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// dropUnmirrored removes, with a warning, each channel whose peer is not
// in the set or has no channel back: TriOnyx ignores such a channel, and
// so does bcpgw with --compat trionyx (no query or push can use it).
func (s *Set) dropUnmirrored() {
	for _, d := range s.Agents {
		kept := d.Channels[:0]
		for _, c := range d.Channels {
			peer := s.byName[c.Peer]
			switch {
			case c.Peer == "" || c.Role == "" || c.Peer == d.Name || c.dup:
			case peer == nil && s.unnamed[c.Peer]:
			case peer == nil:
				s.Warnings = append(s.Warnings, d.warnf(chanPath(c, "peer"), "no agent named %q in %s: the channel is ignored, as TriOnyx ignores it", c.Peer, s.Dir))
				continue
			case peer.Channel(d.Name) == nil && !peer.broken:
				s.Warnings = append(s.Warnings, d.warnf(chanPath(c, "peer"), "%s has no channel back to %s: the channel is ignored, as TriOnyx ignores it; add {peer: %s, role: %s} to its bcp_channels in %s to use it",
					peer.Name, d.Name, d.Name, c.Role.Opposite(), peer.File))
				continue
			}
			kept = append(kept, c)
		}
		d.Channels = kept
	}
}

// finishTriOnyx gives the warnings that need both sides of a channel and,
// for a valid set loaded with MakeDirs, creates its missing writable
// directories.
func (s *Set) finishTriOnyx(valid bool) []*ParseError {
	for _, l := range s.Links {
		for _, side := range []struct {
			def *Definition
			ch  *Channel
		}{{l.Controller, l.ControllerSide}, {l.Reader, l.ReaderSide}} {
			if side.ch.BudgetBits >= UnlimitedBudget {
				s.Warnings = append(s.Warnings, side.def.warnf(index("bcp_channels", side.ch.index),
					"no budget_bits: unlimited with --compat trionyx (TriOnyx has no bit budgets; its rates limit the channel); "+
						"set budget_bits to bound the bits one %s session may exchange with %s", side.def.Name, side.ch.Peer))
			}
		}
		for _, sub := range l.ControllerSide.Subscriptions {
			for _, side := range []struct {
				def *Definition
				ch  *Channel
			}{{l.Controller, l.ControllerSide}, {l.Reader, l.ReaderSide}} {
				if side.ch.Rates != nil && side.ch.Rates.For(sub.Spec.Category).Denied() && sub.Spec.Category <= l.MaxCategory() {
					s.Warnings = append(s.Warnings, l.Controller.warnf(sub.path, "%s is Cat-%d, which %s's rates deny (rates.cat%d: 0): its pushes will all be refused",
						sub.ID, sub.Spec.Category, side.def.Name, sub.Spec.Category))
				}
			}
		}
	}
	if !valid || !s.opts.MakeDirs {
		return nil
	}
	var errs []*ParseError
	for _, p := range s.makeDirs {
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			errs = append(errs, p.def.errorf(p.at, "create %s: %v", p.dir, unwrapPath(err)))
		}
	}
	return errs
}
