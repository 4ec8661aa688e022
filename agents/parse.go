package agents

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/robfig/cron/v3"
	"gopkg.in/yaml.v3"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/yamlnode"
)

// MaxFileBytes bounds a definition file. Definitions are a page or two;
// anything near this size is a mistake, not a system prompt.
const MaxFileBytes = 1 << 20

var (
	agentName      = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	subscriptionID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	envName        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	yamlErrLine    = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	documentMark   = regexp.MustCompile(`^(?:---|\.\.\.)(?:\s|$)`)
	// yaml.v3 numbers the lines of its parser errors (unlike its scanner
	// errors) from 0; these are the parser's messages.
	yamlParserErr = regexp.MustCompile(`did not find expected (?:<document start>|node content|'-' indicator|key|',' or '\]'|',' or '\}')$|^found (?:undefined tag handle|duplicate %YAML directive|incompatible YAML document|duplicate %TAG directive)`)
)

// reservedEnv may not be set by a definition: the gateway sets it, and it
// is how a runtime learns its own name.
const reservedEnv = "BCPGW_AGENT"

// Parse parses one definition file. path is used for error messages and to
// resolve workdir and sandbox paths. On failure the error is a *LoadError listing every
// problem found in the file. Rules that need the whole set (peers,
// mirrors, duplicate names, the paths agents may use) are checked by Load.
func Parse(path string, data []byte) (*Definition, error) {
	def, errs := parseFile(path, data)
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, &LoadError{Errors: errs}
	}
	return def, nil
}

// parseFile returns the definition, possibly partial, and its problems.
// Load keeps a partial definition that has a name so that its peers are
// not reported missing because of an unrelated typo.
func parseFile(path string, data []byte) (*Definition, []*ParseError) {
	d := &decoder{file: path, offset: 1, lines: lineIndex{}}
	def := parse(d, data)
	if def != nil && len(d.errs) > 0 {
		def.broken = true
	}
	return def, d.errs
}

// frontmatter checks data as a definition file (size, text, one closed
// YAML block holding one map) and returns that map and the body after
// it. On failure it reports why and returns nil. required names the keys
// an empty frontmatter is told to hold.
func (d *decoder) frontmatter(data []byte, required string) (*yaml.Node, string) {
	whole := func(format string, args ...any) (*yaml.Node, string) {
		d.errorf(0, "", format, args...)
		return nil, ""
	}
	switch {
	case len(data) > MaxFileBytes:
		return whole("file is %d bytes; a definition may be at most %d", len(data), MaxFileBytes)
	case len(bytes.TrimSpace(data)) == 0:
		return whole("file is empty: a definition starts with YAML frontmatter between --- lines")
	case !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0:
		return whole("file is not UTF-8 text (binary bytes found)")
	}
	data = bytes.TrimPrefix(data, []byte("\uFEFF"))
	fm := findFrontmatter(data)
	if fm == nil {
		return whole("no frontmatter: the file must start with a --- line, then YAML, then another --- line")
	}
	if !fm.closed {
		d.errorf(1, "", "frontmatter is not closed: add a --- line after the YAML")
		return nil, ""
	}
	if line, r, ok := controlChar(fm.yaml); ok {
		if r == '\r' {
			d.errorf(line+d.offset, "", "invalid YAML: a carriage return (U+000D) not followed by a newline; save the file with LF or CRLF line endings")
		} else {
			d.errorf(line+d.offset, "", "invalid YAML: control character U+%04X (only tab, newline and carriage return are allowed)", r)
		}
		return nil, ""
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(fm.yaml))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		d.yamlError(err, fm.yaml)
		return nil, ""
	}
	// A "--- # comment" or "..." line inside the frontmatter starts a
	// second YAML document, which yaml.Unmarshal would silently ignore
	// along with every limit in it.
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		d.errorf(documentMarker(fm.yaml)+d.offset, "", "frontmatter holds more than one YAML document (a \"---\" or \"...\" line inside it); keep all fields in one block")
		return nil, ""
	}
	if len(doc.Content) == 0 {
		d.errorf(1, "", "frontmatter is empty: at least %s are required", required)
		return nil, ""
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		d.fail(root, "", "frontmatter must be a map of fields, got %s", yamlnode.Describe(root))
		return nil, ""
	}
	d.lines[""] = 1
	return root, strings.TrimSpace(string(data[fm.bodyStart:]))
}

func parse(d *decoder, data []byte) *Definition {
	root, body := d.frontmatter(data, "name and runtime")
	if root == nil {
		return nil
	}
	def := &Definition{
		File:         d.file,
		IdleTimeout:  DefaultIdleTimeout,
		Sandbox:      Sandbox{Network: Network{Mode: NetworkNone}},
		SystemPrompt: body,
		lines:        d.lines,
	}
	d.mapping(root, "", fields{
		"name": func(n *yaml.Node, p string) {
			if s, ok := d.str(n, p); ok {
				if !agentName.MatchString(s) {
					d.fail(n, p, "%q is not a valid agent name (lower-case letters, digits, _ and -, starting with a letter or digit)", s)
				}
				def.Name = s
			}
		},
		"description": func(n *yaml.Node, p string) { def.Description, _ = d.str(n, p) },
		"runtime": func(n *yaml.Node, p string) {
			argv, ok := d.list(n, p, strings.Fields)
			if ok && (len(argv) == 0 || argv[0] == "") {
				d.fail(n, p, "must name the runtime program")
			}
			def.Runtime = argv
		},
		"workdir": func(n *yaml.Node, p string) {
			if s, ok := d.str(n, p); ok {
				def.Workdir, _ = d.localPath(n, p, s)
			}
		},
		"env":   func(n *yaml.Node, p string) { def.Env = d.env(n, p) },
		"model": func(n *yaml.Node, p string) { def.Model, _ = d.str(n, p) },
		"tools": func(n *yaml.Node, p string) { def.Tools, _ = d.list(n, p, splitComma) },
		"max_turns": func(n *yaml.Node, p string) {
			def.MaxTurns, _ = d.atLeast(n, p, 0)
		},
		"idle_timeout": func(n *yaml.Node, p string) {
			if v, ok := d.duration(n, p); ok {
				def.IdleTimeout = v
			}
		},
		"autostart": func(n *yaml.Node, p string) { def.Autostart, _ = d.boolean(n, p) },
		"bcp_channels": func(n *yaml.Node, p string) {
			i := 0
			d.sequence(n, p, func(item *yaml.Node, ip string) {
				if c := d.channel(item, ip, i); c != nil {
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
		"sandbox":         func(n *yaml.Node, p string) { d.sandbox(n, p, def) },
		"runtime_dialect": func(n *yaml.Node, p string) { d.dialect(n, p, def) },
		"flood_limit":     func(n *yaml.Node, p string) { d.floodLimit(n, p, def) },
		"turn_timeout":    func(n *yaml.Node, p string) { d.turnTimeout(n, p, def) },
	})
	if def.Name == "" && !d.has("name") {
		d.errorf(1, "name", "required")
	}
	if def.Runtime == nil && !d.has("runtime") {
		d.errorf(1, "runtime", "required: the command that runs this agent, e.g. [bin/demo-agent, --role, reader]")
	}
	d.checkChannels(def)
	return def
}

// dialect decodes runtime_dialect into def.
func (d *decoder) dialect(n *yaml.Node, p string, def *Definition) {
	if s, ok := d.str(n, p); ok {
		switch Dialect(s) {
		case DialectBCPGW, DialectTriOnyx:
			def.Dialect = Dialect(s)
		default:
			d.fail(n, p, "must be %s or %s, got %q", DialectBCPGW, DialectTriOnyx, s)
		}
	}
}

// turnTimeout decodes turn_timeout into def (both formats): a Go
// duration of at least a second. There is no "never", unlike idle_timeout:
// a runtime that hangs in a turn would hold its work for ever.
func (d *decoder) turnTimeout(n *yaml.Node, p string, def *Definition) {
	s, ok := d.str(n, p)
	if !ok {
		return
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.fail(n, p, "%q is not a duration (examples: 90s, 15m, 2h)", s)
	case v < time.Second:
		d.fail(n, p, "must be at least 1s, got %q: there is no \"never\"; give a long one (e.g. 24h) for runtimes whose turns take hours", s)
	default:
		def.TurnTimeout = v
	}
}

// env decodes an env map: variable names checked, the gateway's own
// variable refused, values kept as written.
func (d *decoder) env(n *yaml.Node, p string) map[string]string {
	out := map[string]string{}
	env := fields{}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			env[name] = func(v *yaml.Node, vp string) {
				switch {
				case !envName.MatchString(name):
					d.fail(v, vp, "%q is not a valid variable name", name)
				case name == reservedEnv:
					d.fail(v, vp, "%s is set by the gateway and cannot be overridden", reservedEnv)
				default:
					if s, ok := d.str(v, vp); ok {
						out[name] = s
					}
				}
			}
		}
	}
	d.mapping(n, p, env)
	return out
}

// failed reports whether an error was already reported at path.
func (d *decoder) failed(path string) bool { return d.failedAt[path] }

// has reports whether path was present in the file.
func (d *decoder) has(path string) bool {
	_, ok := d.lines[path]
	return ok
}

// documentMarker returns the 1-based line of the first "---" or "..."
// document marker in src, or 0.
func documentMarker(src []byte) int {
	for i, line := range strings.Split(string(src), "\n") {
		if documentMark.MatchString(line) {
			return i + 1
		}
	}
	return 0
}

// controlChar finds the first control character YAML does not allow,
// with its 1-based line (yaml.v3 reports these without a line).
//
// A carriage return is allowed only before a newline (CRLF line endings):
// YAML reads a lone one as a line break where an editor may not, so the
// lines counted here and the parser's would part, and every later error
// would name the wrong line.
func controlChar(src []byte) (int, rune, bool) {
	line := 1
	s := string(src)
	for i, r := range s {
		switch {
		case r == '\n':
			line++
		case r == '\r':
			if i+1 < len(s) && s[i+1] == '\n' {
				continue
			}
			return line, r, true
		case r == '\t':
		case r < 0x20 || r == 0x7f:
			return line, r, true
		}
	}
	return 0, 0, false
}

// yamlError turns a yaml.v3 syntax error into a ParseError with a file
// line.
func (d *decoder) yamlError(err error, src []byte) {
	msg := err.Error()
	m := yamlErrLine.FindStringSubmatch(msg)
	if m == nil {
		d.errorf(1, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
		return
	}
	line, _ := strconv.Atoi(m[1])
	text := m[2]
	if yamlParserErr.MatchString(text) {
		line++
		// yaml.v3 names the line where the enclosing block began (a list
		// item three lines up, say), not the mistake: the mistake is on
		// the first line at which the YAML so far fails the same way.
		if l, ok := firstFailingLine(src, text); ok {
			line = l
		}
	}
	if l := srcLine(src, line); strings.HasPrefix(strings.TrimLeft(l, " "), "\t") {
		text += " (YAML does not allow tabs for indentation; use spaces)"
	} else if hint := yamlHints[text]; hint != "" {
		text += " (" + hint + ")"
	}
	d.errorf(line+d.offset, "", "invalid YAML: %s", text)
}

// yamlHints say in plain words what yaml.v3's commonest syntax errors
// usually mean.
var yamlHints = map[string]string{
	"did not find expected '-' indicator":            "this line is not indented like the list items above it",
	"did not find expected key":                      "this line is not indented like the keys above it",
	"did not find expected ',' or ']'":               "a [ list opened here is not closed with ], or lacks a comma",
	"did not find expected ',' or '}'":               "a { map opened here is not closed with }, or lacks a comma",
	"found unexpected end of stream":                 "a quote or bracket opened here is never closed",
	"mapping values are not allowed in this context": "a value holds ': '; put it in quotes",
}

// maxPrefixLines bounds firstFailingLine's work: it parses every prefix.
const maxPrefixLines = 2000

// firstFailingLine returns the first line L such that the YAML of src's
// first L lines fails with the parser error text: where the document
// stops making sense.
func firstFailingLine(src []byte, text string) (int, bool) {
	lines := bytes.SplitAfter(src, []byte("\n"))
	if len(lines) > maxPrefixLines {
		return 0, false
	}
	var prefix []byte
	for i, l := range lines {
		prefix = append(prefix, l...)
		var n yaml.Node
		err := yaml.Unmarshal(prefix, &n)
		if err == nil {
			continue
		}
		if m := yamlErrLine.FindStringSubmatch(err.Error()); m != nil && m[2] == text {
			return i + 1, true
		}
	}
	return 0, false
}

func srcLine(src []byte, line int) string {
	lines := strings.Split(string(src), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	return lines[line-1]
}

// duration decodes a Go duration ("10m", "1h30m") or the integer 0.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Value == "0" {
		return 0, true
	}
	s, ok := d.str(n, path)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.fail(n, path, "%q is not a duration (examples: 90s, 10m, 1h; 0 means never)", s)
		return 0, false
	}
	if v < 0 {
		d.fail(n, path, "must not be negative")
		return 0, false
	}
	return v, true
}

// checkSchedule parses a cron schedule. robfig/cron panics on some
// malformed time-zone prefixes ("TZ=UTC" with nothing after it), so the
// panic is turned into an error; and "@every" must be at least a second
// (a negative interval would silently mean "every second").
func checkSchedule(s string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed schedule")
		}
	}()
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, perr := time.ParseDuration(strings.TrimSpace(rest))
		if perr != nil {
			return perr
		}
		if d < time.Second {
			return fmt.Errorf("@every needs an interval of at least 1s, got %s", d)
		}
	}
	_, err = cron.ParseStandard(s)
	return err
}

func (d *decoder) cron(n *yaml.Node, path string) (CronSchedule, bool) {
	var c CronSchedule
	ok := d.mapping(n, path, fields{
		"schedule": func(n *yaml.Node, p string) {
			if s, good := d.str(n, p); good {
				if err := checkSchedule(s); err != nil {
					d.fail(n, p, "%q is not a cron schedule: %v", s, err)
				}
				c.Schedule = s
			}
		},
		"message": func(n *yaml.Node, p string) { c.Message, _ = d.str(n, p) },
		"label":   func(n *yaml.Node, p string) { c.Label, _ = d.str(n, p) },
	})
	if !ok {
		return c, false
	}
	if !d.has(join(path, "schedule")) {
		d.fail(n, join(path, "schedule"), "required")
	}
	if !d.has(join(path, "message")) {
		d.fail(n, join(path, "message"), "required: the prompt sent on schedule")
	}
	return c, true
}

func (d *decoder) channel(n *yaml.Node, path string, idx int) *Channel {
	c := &Channel{index: idx}
	var subs, approvals *yaml.Node
	fs := d.channelFields(c)
	maps.Copy(fs, fields{
		"max_category": func(n *yaml.Node, p string) {
			if v, good := d.integer(n, p); good {
				if v < 1 || v > 3 {
					d.fail(n, p, "must be 1, 2 or 3, got %d", v)
					return
				}
				c.MaxCategory = bcp.Category(v)
			}
		},
		"budget_bits": func(n *yaml.Node, p string) {
			if v, good := d.integer(n, p); good {
				if v <= 0 {
					d.fail(n, p, "must be > 0, got %d", v)
					return
				}
				c.BudgetBits = v
			}
		},
		"subscriptions": func(n *yaml.Node, p string) { subs = n },
		"approvals":     func(n *yaml.Node, p string) { approvals = n },
	})
	if !d.mapping(n, path, fs) {
		return nil
	}
	if approvals != nil { // once the role is known, wherever it was written
		d.channelApprovals(approvals, join(path, "approvals"), c)
	}
	for _, key := range []string{"peer", "role", "max_category", "budget_bits"} {
		if !d.has(join(path, key)) {
			d.fail(n, join(path, key), "required")
		}
	}
	d.subscriptions(subs, join(path, "subscriptions"), c, nil)
	return c
}

// channelFields decodes the keys every channel has, bcpgw's or TriOnyx's:
// peer, role and the query counters.
func (d *decoder) channelFields(c *Channel) fields {
	return fields{
		"peer": func(n *yaml.Node, p string) {
			if s, good := d.str(n, p); good {
				if !agentName.MatchString(s) {
					d.fail(n, p, "%q is not a valid agent name", s)
					return
				}
				c.Peer = s
			}
		},
		"role": func(n *yaml.Node, p string) {
			s, good := d.str(n, p)
			if good && s != string(RoleController) && s != string(RoleReader) {
				d.fail(n, p, "must be controller or reader, got %q", s)
				return
			}
			c.Role = Role(s)
		},
		"max_cat2_queries": func(n *yaml.Node, p string) { c.MaxCat2Queries, _ = d.atLeast(n, p, 0) },
		"max_cat3_queries": func(n *yaml.Node, p string) { c.MaxCat3Queries, _ = d.atLeast(n, p, 0) },
	}
}

// subscriptions decodes a controller side's subscriptions into c, each
// id once; prepare, if set, adjusts each item's YAML first.
func (d *decoder) subscriptions(subs *yaml.Node, sp string, c *Channel, prepare func(*yaml.Node)) {
	if subs == nil {
		return
	}
	if c.Role == RoleReader {
		d.fail(subs, sp, "only a controller declares subscriptions (this side is the reader)")
		return
	}
	seen := map[string]string{}
	d.sequence(subs, sp, func(item *yaml.Node, ip string) {
		if prepare != nil {
			prepare(item)
		}
		s := d.subscription(item, ip, c.MaxCategory)
		if s == nil {
			return
		}
		if first, dup := seen[s.ID]; dup && s.ID != "" {
			d.errorf(d.lines.line(join(ip, "id")), join(ip, "id"), "duplicate subscription id %q (also %s)", s.ID, first)
			return
		}
		seen[s.ID] = ip
		c.Subscriptions = append(c.Subscriptions, s)
	})
}

func (d *decoder) subscription(n *yaml.Node, path string, max bcp.Category) *Subscription {
	s := &Subscription{path: path}
	spec := &s.Spec
	pol := d.policy(s, path) // rate_limit, filter, debounce, batch (policy.go)
	ok := d.mapping(n, path, fields{
		"rate_limit": pol.rateLimit,
		"filter":     pol.filterKey,
		"debounce":   pol.debounce,
		"batch":      pol.batch,
		"approvals":  func(n *yaml.Node, p string) { s.Approvals = d.approvals(n, p) },
		"id": func(n *yaml.Node, p string) {
			if v, good := d.str(n, p); good {
				if !subscriptionID.MatchString(v) {
					d.fail(n, p, "%q is not a valid subscription id (lower-case letters, digits and -, starting with a letter or digit)", v)
				}
				s.ID = v
			}
		},
		"category": func(n *yaml.Node, p string) {
			if v, good := d.integer(n, p); good {
				spec.Category = bcp.Category(v)
			}
		},
		"fields": func(n *yaml.Node, p string) {
			spec.Fields = []bcp.Field{}
			d.sequence(n, p, func(item *yaml.Node, ip string) {
				spec.Fields = append(spec.Fields, d.field(item, ip))
			})
		},
		"questions": func(n *yaml.Node, p string) {
			spec.Questions = []bcp.Question{}
			d.sequence(n, p, func(item *yaml.Node, ip string) {
				spec.Questions = append(spec.Questions, d.question(item, ip))
			})
		},
		"directive": func(n *yaml.Node, p string) { spec.Directive, _ = d.nonEmpty(n, p) },
		"max_words": func(n *yaml.Node, p string) {
			if v, good := d.atLeast(n, p, 1); good {
				spec.MaxWords = v
			}
		},
		"on_anomaly": func(n *yaml.Node, p string) {
			if v, good := d.nonEmpty(n, p); good {
				spec.OnAnomaly = bcp.OnAnomaly(v)
			}
		},
	})
	if !ok {
		return nil
	}
	if !d.has(join(path, "id")) {
		d.fail(n, join(path, "id"), "required")
	}
	if !d.has(join(path, "category")) {
		d.fail(n, join(path, "category"), "required (1, 2 or 3)")
		return nil
	}
	if spec.Category.Valid() && max.Valid() && spec.Category > max {
		p := join(path, "category")
		d.errorf(d.lines.line(p), p, "%d exceeds channel max_category %d", spec.Category, max)
	}
	for _, pr := range spec.Problems() {
		p := d.respell(join(path, pr.Path))
		if d.failed(p) {
			continue // the value was refused while decoding; once is enough
		}
		d.errorf(d.lines.line(p), p, "%s", pr.Msg)
	}
	// Cat-2 questions without their own limit inherit the subscription's,
	// so that what a Reader is told is complete per question.
	*spec = spec.Complete()
	s.Bits = bcp.Bits(*spec)
	pol.finish(*spec)
	return s
}

// field decodes a Cat-1 field. The enum's choices may be spelled values
// or, as TriOnyx's runtime does, options.
func (d *decoder) field(n *yaml.Node, path string) bcp.Field {
	var f bcp.Field
	fs := fields{
		"name": func(n *yaml.Node, p string) { f.Name, _ = d.str(n, p) },
		"type": func(n *yaml.Node, p string) {
			v, _ := d.str(n, p)
			f.Type = bcp.FieldType(v)
		},
		"min": func(n *yaml.Node, p string) { f.Min = d.intPtr(n, p) },
		"max": func(n *yaml.Node, p string) { f.Max = d.intPtr(n, p) },
	}
	d.pair(fs, path, "values", "options", func(n *yaml.Node, p string) {
		f.Values = []string{}
		d.sequence(n, p, func(item *yaml.Node, ip string) {
			if v, ok := d.str(item, ip); ok {
				f.Values = append(f.Values, v)
			}
		})
	})
	d.mapping(n, path, fs)
	return f
}

// question decodes a Cat-2 question, in bcpgw's spelling {id, question,
// expected_format} or TriOnyx's {name, format}. With id the question text
// is required; with name it is optional: the name is the question.
func (d *decoder) question(n *yaml.Node, path string) bcp.Question {
	var q bcp.Question
	fs := fields{
		"question": func(n *yaml.Node, p string) { q.Question, _ = d.nonEmpty(n, p) },
		"max_words": func(n *yaml.Node, p string) {
			if v, ok := d.atLeast(n, p, 1); ok {
				q.MaxWords = v
			}
		},
		"min": func(n *yaml.Node, p string) { q.Min = d.intPtr(n, p) },
		"max": func(n *yaml.Node, p string) { q.Max = d.intPtr(n, p) },
	}
	d.pair(fs, path, "id", "name", func(n *yaml.Node, p string) { q.ID, _ = d.str(n, p) })
	d.pair(fs, path, "expected_format", "format", func(n *yaml.Node, p string) {
		v, _ := d.nonEmpty(n, p)
		q.Format = bcp.Format(v)
	})
	ok := d.mapping(n, path, fs)
	if _, byName := d.spelled[join(path, "id")]; ok && !byName && d.has(join(path, "id")) && !d.has(join(path, "question")) {
		d.errorf(d.lines.line(path), join(path, "question"), `required with "id" (with TriOnyx's "name" instead of "id", the name is the question and the text is optional)`)
	}
	return q
}

func (d *decoder) intPtr(n *yaml.Node, path string) *int64 {
	v, ok := d.integer(n, path)
	if !ok {
		return nil
	}
	return &v
}

// checkChannels applies the per-file channel rules: a peer other than
// oneself, at most one channel per peer.
func (d *decoder) checkChannels(def *Definition) {
	seen := map[string]int{}
	for _, c := range def.Channels {
		p := index("bcp_channels", c.index)
		if c.Peer == "" {
			continue
		}
		pp := join(p, "peer")
		switch first, dup := seen[c.Peer]; {
		case c.Peer == def.Name:
			d.errorf(d.lines.line(pp), pp, "an agent cannot have a channel to itself")
		case dup:
			c.dup = true
			d.errorf(d.lines.line(pp), pp, "second channel to %q (bcp_channels[%d] already is); at most one channel per peer", c.Peer, first)
		default:
			seen[c.Peer] = c.index
		}
	}
}

func (c *Channel) String() string { return fmt.Sprintf("%s channel to %s", c.Role, c.Peer) }
