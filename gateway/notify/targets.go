package notify

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/internal/yamlnode"
)

// Format is how a target wants its notifications written.
type Format string

// The formats.
const (
	// FormatJSON is the event as stored (see Message), for programs.
	FormatJSON Format = "json"
	// FormatSlack is a Slack incoming webhook's {"text": ...}: what
	// happened, the item, its anomalies and the command to decide it.
	FormatSlack Format = "slack"
	// FormatNtfy is an ntfy.sh publish: the text as the body, and a
	// title, a priority and tags as headers.
	FormatNtfy Format = "ntfy"
)

var formats = []Format{FormatJSON, FormatSlack, FormatNtfy}

// MaxFileBytes bounds a notify file.
const MaxFileBytes = 256 << 10

// minSecretBytes is the shortest signing key accepted: Standard Webhooks
// asks for 24 to 64 random bytes; 16 is the floor below which an HMAC key
// is guessable.
const minSecretBytes = 16

// Target is one webhook endpoint of the notify file.
type Target struct {
	Name   string // ^[a-z0-9][a-z0-9_-]*$, unique in the file; names its cursor and its metrics
	Line   int    // where its entry starts in the file
	URL    string // https, or http to a loopback address only
	Format Format
	// Events are the glob patterns (path.Match) of the event kinds it
	// wants; a pattern also matches a refusal (kind refused) by its
	// error code. See Matches.
	Events []string
	// SecretEnv names the variable holding the signing key; empty means
	// the requests are not signed. TokenEnv names a variable whose value
	// is sent as "Authorization: Bearer ..."; URLEnv the variable the URL
	// came from, if it did.
	SecretEnv, TokenEnv, URLEnv string

	secret []byte // the signing key (see decodeSecret)
	token  string
}

// Signed reports whether the target's requests carry a signature.
func (t *Target) Signed() bool { return len(t.secret) > 0 }

// URLHash is the hex SHA-256 of the target's URL: what the store keeps to
// know whether the URL that answered 410 Gone is still the one in use
// (the URL may be a secret, and is not stored).
func (t *Target) URLHash() string {
	sum := sha256.Sum256([]byte(t.URL))
	return hex.EncodeToString(sum[:])
}

// Host is the target's host for logs: its URL's path and query may hold
// secrets (a Slack webhook's do).
func (t *Target) Host() string {
	u, err := url.Parse(t.URL)
	if err != nil {
		return "?"
	}
	return u.Host
}

// same reports whether t and o would send the same requests to the same
// place; a reload restarts only the targets that changed.
func (t *Target) same(o *Target) bool {
	return t.Name == o.Name && t.URL == o.URL && t.Format == o.Format && strings.Join(t.Events, "\x00") == strings.Join(o.Events, "\x00") &&
		bytes.Equal(t.secret, o.secret) && t.token == o.token
}

// Targets is a loaded notify file.
type Targets struct {
	File string
	List []*Target
}

// Target returns the target named name, or nil.
func (ts *Targets) Target(name string) *Target {
	if ts == nil {
		return nil
	}
	for _, t := range ts.List {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Names lists the targets' names in file order.
func (ts *Targets) Names() []string {
	if ts == nil {
		return nil
	}
	out := make([]string, len(ts.List))
	for i, t := range ts.List {
		out[i] = t.Name
	}
	return out
}

// Load reads and checks the notify file at file. getenv looks up the
// variables named by secret_env, token_env and url_env (os.Getenv when
// nil): a variable that is unset or empty is an error now, not a failure
// at the first notification. Every problem is reported, each at its line,
// as an *agents.LoadError.
func Load(file string, getenv func(string) string) (*Targets, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("notify file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("notify file %s: %w", file, err)
	}
	return Parse(file, data, getenv)
}

var nameRule = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// maxNameLen bounds a target's name: it becomes a metric label and a key.
const maxNameLen = 64

// Parse checks data as the notify file named file (see Load).
func Parse(file string, data []byte, getenv func(string) string) (*Targets, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	d := &decoder{file: file, getenv: getenv}
	ts := &Targets{File: file}
	switch {
	case len(data) > MaxFileBytes:
		d.errorf(0, "", "file is larger than %d bytes", MaxFileBytes)
	case !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0:
		d.errorf(0, "", "file is not UTF-8 text")
	default:
		d.file0(data, ts)
	}
	if len(d.errs) > 0 {
		return nil, &agents.LoadError{Errors: d.errs}
	}
	return ts, nil
}

// decoder walks the file's YAML nodes, collecting every problem with its
// line (the way agents' definitions are checked).
type decoder struct {
	file   string
	getenv func(string) string
	errs   []*agents.ParseError
}

func (d *decoder) errorf(line int, p, format string, args ...any) {
	d.errs = append(d.errs, &agents.ParseError{File: d.file, Line: line, Path: p, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) fail(n *yaml.Node, p, format string, args ...any) {
	d.errorf(n.Line, p, format, args...)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *decoder) file0(data []byte, ts *Targets) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return // an empty file: no targets
		}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			d.errorf(line, "", "invalid YAML: %s", m[2])
		} else {
			d.errorf(0, "", "invalid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		d.errorf(extra.Line, "", "more than one YAML document (a --- line); keep everything in one")
		return
	}
	if len(doc.Content) == 0 {
		return
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return
	}
	d.mapping(root, "", map[string]func(*yaml.Node, string){
		"targets": func(n *yaml.Node, p string) { d.targets(n, p, ts) },
	})
}

// mapping walks a map: unknown and duplicate keys are errors; known keys
// go to their handlers in file order.
func (d *decoder) mapping(n *yaml.Node, p string, fields map[string]func(*yaml.Node, string)) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, p, "must be a map, got %s", yamlnode.Describe(n))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := join(p, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, kp, "duplicate key (first set on line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		fn, ok := fields[k.Value]
		if !ok {
			d.fail(k, kp, "unknown key (known: %s)", strings.Join(sortedKeys(fields), ", "))
			continue
		}
		fn(v, kp)
	}
	return true
}

func (d *decoder) targets(n *yaml.Node, p string, ts *Targets) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, p, "must be a list of targets, got %s", yamlnode.Describe(n))
		return
	}
	names := map[string]int{}
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", p, i)
		t := d.target(item, ip)
		if t == nil {
			continue
		}
		if first, dup := names[t.Name]; dup {
			d.fail(item, ip+".name", "%q is already the name of the target on line %d", t.Name, first)
			continue
		}
		names[t.Name] = t.Line
		ts.List = append(ts.List, t)
	}
}

// target checks one entry; nil if it has errors.
func (d *decoder) target(n *yaml.Node, p string) *Target {
	before := len(d.errs)
	t := &Target{Line: n.Line, Format: FormatJSON}
	var urlNode, urlEnvNode, nameNode, eventsNode *yaml.Node
	str := func(dst *string, node **yaml.Node) func(*yaml.Node, string) {
		return func(v *yaml.Node, vp string) {
			if node != nil {
				*node = v
			}
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				d.fail(v, vp, "must be a string, got %s", yamlnode.Describe(v))
				return
			}
			*dst = v.Value
		}
	}
	var format string
	var formatNode *yaml.Node
	ok := d.mapping(n, p, map[string]func(*yaml.Node, string){
		"name":       str(&t.Name, &nameNode),
		"url":        str(&t.URL, &urlNode),
		"url_env":    str(&t.URLEnv, &urlEnvNode),
		"format":     str(&format, &formatNode),
		"secret_env": d.envVar(&t.SecretEnv),
		"token_env":  d.envVar(&t.TokenEnv),
		"events": func(v *yaml.Node, vp string) {
			eventsNode = v
			t.Events = d.patterns(v, vp)
		},
	})
	if !ok {
		return nil
	}
	switch {
	case nameNode == nil:
		d.fail(n, join(p, "name"), "required: a name for the target (its cursor and metrics go by it)")
	case !nameRule.MatchString(t.Name) || len(t.Name) > maxNameLen:
		d.fail(nameNode, join(p, "name"), "%q must match %s and be at most %d characters", t.Name, nameRule, maxNameLen)
	}
	if formatNode != nil {
		t.Format = Format(format)
		if !validFormat(t.Format) {
			d.fail(formatNode, join(p, "format"), "%q is not a format: use json, slack or ntfy", format)
		}
	}
	if eventsNode == nil {
		d.fail(n, join(p, "events"), "required: the event kinds to send, e.g. [approval_queued, agent_failed]")
	}
	switch {
	case urlNode != nil && urlEnvNode != nil:
		d.fail(urlEnvNode, join(p, "url_env"), "url is set too; write one of them")
	case urlNode == nil && urlEnvNode == nil:
		d.fail(n, join(p, "url"), "required: the endpoint (or url_env naming a variable that holds it)")
	case urlNode != nil:
		if err := CheckURL(t.URL); err != nil {
			d.fail(urlNode, join(p, "url"), "%v", err)
		}
	default:
		t.URL = d.getenv(t.URLEnv)
		if t.URL == "" {
			d.fail(urlEnvNode, join(p, "url_env"), "$%s is not set: export it where bcpgw runs", t.URLEnv)
		} else if err := CheckURL(t.URL); err != nil {
			d.fail(urlEnvNode, join(p, "url_env"), "$%s: %v", t.URLEnv, err)
		}
	}
	if t.SecretEnv != "" {
		if v := d.getenv(t.SecretEnv); v == "" {
			d.errorf(d.lineOf(n, "secret_env"), join(p, "secret_env"), "$%s is not set: export the signing secret where bcpgw runs", t.SecretEnv)
		} else if key, err := decodeSecret(v); err != nil {
			d.errorf(d.lineOf(n, "secret_env"), join(p, "secret_env"), "$%s: %v", t.SecretEnv, err)
		} else {
			t.secret = key
		}
	}
	if t.TokenEnv != "" {
		t.token = d.getenv(t.TokenEnv)
		switch {
		case t.token == "":
			d.errorf(d.lineOf(n, "token_env"), join(p, "token_env"), "$%s is not set: export the token where bcpgw runs", t.TokenEnv)
		case strings.ContainsAny(t.token, "\r\n"):
			d.errorf(d.lineOf(n, "token_env"), join(p, "token_env"), "$%s holds a line break, which cannot go in a header", t.TokenEnv)
		case !httpguts.ValidHeaderFieldValue("Bearer " + t.token):
			// Every request would fail before reaching the network.
			d.errorf(d.lineOf(n, "token_env"), join(p, "token_env"), "$%s holds a control character, which cannot go in a header", t.TokenEnv)
		}
	}
	if len(d.errs) > before {
		return nil
	}
	return t
}

// envVar decodes a key naming an environment variable.
func (d *decoder) envVar(dst *string) func(*yaml.Node, string) {
	return func(v *yaml.Node, vp string) {
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			d.fail(v, vp, "must be the name of an environment variable, got %s", yamlnode.Describe(v))
			return
		}
		if !envName.MatchString(v.Value) {
			d.fail(v, vp, "%q is not the name of an environment variable (letters, digits and _)", v.Value)
			return
		}
		*dst = v.Value
	}
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// lineOf is the line of key in mapping n, or n's own line.
func (d *decoder) lineOf(n *yaml.Node, key string) int {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i].Line
		}
	}
	return n.Line
}

// patterns checks a list of event patterns: each a valid glob that
// matches at least one event kind or refusal code the gateway records, so
// that a typo cannot silently send nothing.
func (d *decoder) patterns(n *yaml.Node, p string) []string {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, p, "must be a list of event kinds or patterns, got %s", yamlnode.Describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		d.fail(n, p, "must name at least one event kind or pattern")
		return nil
	}
	var out []string
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", p, i)
		if item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
			d.fail(item, ip, "must be an event kind or pattern (a string), got %s", yamlnode.Describe(item))
			continue
		}
		if err := CheckPattern(item.Value); err != nil {
			d.fail(item, ip, "%v", err)
			continue
		}
		out = append(out, item.Value)
	}
	return out
}

// CheckURL accepts https URLs, and http ones only to a loopback address
// (127.0.0.0/8, ::1, localhost): a notification carries what the gateway
// saw, and the signature does not hide it.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", errors.Unwrap(err))
	}
	if u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%q is not an absolute URL (https://host/path)", u.Redacted())
	}
	if u.Fragment != "" {
		return fmt.Errorf("a URL with a fragment (#...) is not sent as written: remove it")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if Loopback(u.Hostname()) {
			return nil
		}
		return fmt.Errorf("http is allowed only to a loopback address (127.0.0.1, ::1, localhost): use https for %s", u.Hostname())
	}
	return fmt.Errorf("scheme %q: use https (or http to a loopback address)", u.Scheme)
}

// Loopback reports whether host is a loopback address or localhost.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// decodeSecret turns a signing secret into the HMAC key: a value starting
// with whsec_ is base64 after that prefix (Standard Webhooks' format, so
// their libraries verify with the same string); any other value is used
// as it is, as bytes.
func decodeSecret(v string) ([]byte, error) {
	key := []byte(v)
	if rest, ok := strings.CutPrefix(v, "whsec_"); ok {
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return nil, fmt.Errorf("starts with whsec_ but the rest is not base64: %v", err)
		}
		key = b
	}
	if len(key) < minSecretBytes {
		return nil, fmt.Errorf("the secret is %d bytes; use at least %d random bytes (e.g. whsec_$(head -c 32 /dev/urandom | base64))", len(key), minSecretBytes)
	}
	return key, nil
}

func validFormat(f Format) bool {
	for _, x := range formats {
		if f == x {
			return true
		}
	}
	return false
}

func join(p, key string) string {
	if p == "" {
		return key
	}
	return p + "." + key
}

func sortedKeys(m map[string]func(*yaml.Node, string)) []string {
	return slices.Sorted(maps.Keys(m))
}

// Matches reports whether the target wants e: one of its patterns
// matches e's kind, or, for a refusal (kind refused), its error code
// ("budget_exhausted"). The notifier's own events (notify_*) match only
// patterns that start with "notify_" and never go to the target they are
// about, so that a failing target cannot feed on its own failures.
func (t *Target) Matches(kind, code, ref string) bool {
	notifyKind := strings.HasPrefix(kind, "notify_")
	if notifyKind && ref == t.Name {
		return false
	}
	for _, p := range t.Events {
		if notifyKind && !strings.HasPrefix(p, "notify_") {
			continue
		}
		if ok, _ := path.Match(p, kind); ok {
			return true
		}
		if kind == "refused" && code != "" {
			if ok, _ := path.Match(p, code); ok {
				return true
			}
		}
	}
	return false
}
