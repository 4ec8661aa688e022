package agents

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bcpgw/bcpgw/internal/yamlnode"
	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.v3 node tree, recording the line of every field
// path and collecting every problem instead of stopping at the first.
// Walking nodes, rather than decoding into a struct, is what gives each
// error its field path and lets one pass report all unknown keys.
type decoder struct {
	file     string
	offset   int // added to yaml line numbers to get file line numbers
	lines    lineIndex
	errs     []*ParseError
	failedAt map[string]bool // paths with an error
	// spelled maps the path of a key in bcpgw's spelling to its path as
	// written in TriOnyx's ("...questions[0].expected_format" to
	// "...questions[0].format"), so errors name what the file says.
	spelled map[string]string
}

// pair adds to fs the two spellings of one key: key, bcpgw's, and alias,
// TriOnyx's. Either may be written, not both; fn decodes the value.
func (d *decoder) pair(fs fields, path, key, alias string, fn func(n *yaml.Node, p string)) {
	written := ""
	handler := func(k string) func(n *yaml.Node, p string) {
		return func(n *yaml.Node, p string) {
			if written != "" {
				d.fail(n, p, "both %s and %s are set; write one (%s is TriOnyx's spelling of %s)", written, k, alias, key)
				return
			}
			written = k
			if k == alias {
				if d.spelled == nil {
					d.spelled = map[string]string{}
				}
				d.spelled[join(path, key)] = p
			}
			fn(n, p)
		}
	}
	fs[key], fs[alias] = handler(key), handler(alias)
}

// respell returns path, or the prefix of it, the way the file spelled it.
func (d *decoder) respell(path string) string {
	for canon, as := range d.spelled {
		if path == canon {
			return as
		}
		if rest, ok := strings.CutPrefix(path, canon); ok && (rest[0] == '.' || rest[0] == '[') {
			return as + rest
		}
	}
	return path
}

func (d *decoder) errorf(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &ParseError{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
	if d.failedAt == nil {
		d.failedAt = map[string]bool{}
	}
	d.failedAt[path] = true
}

// fail reports a problem at node n.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.errorf(n.Line+d.offset, path, format, args...)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// fields maps the keys a mapping may hold to their handlers.
type fields map[string]func(n *yaml.Node, path string)

// mapping walks a mapping node: every key is recorded, unknown and
// duplicate keys are errors, and known keys go to their handlers in
// document order. It returns false if n is not a mapping.
func (d *decoder) mapping(n *yaml.Node, path string, fs fields) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be a map, got %s", yamlnode.Describe(n))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain names, got %s", yamlnode.Describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.fail(k, p, "duplicate key (first set on line %d)", first+d.offset)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[p] = k.Line + d.offset
		if d.alias(v, p) {
			continue
		}
		h, ok := fs[k.Value]
		if !ok {
			d.fail(k, p, "unknown field (known: %s)", knownKeys(fs))
			continue
		}
		h(v, p)
	}
	return true
}

// alias refuses anchors and aliases (and so merge keys, which need one):
// a definition should read the same to a person as to the loader.
func (d *decoder) alias(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		d.fail(n, path, "YAML anchors and aliases are not supported in definitions")
		return true
	}
	return false
}

func knownKeys(fs fields) string {
	keys := make([]string, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

// sequence walks a list node, calling fn for each item.
func (d *decoder) sequence(n *yaml.Node, path string, fn func(item *yaml.Node, path string)) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "must be a list, got %s", yamlnode.Describe(n))
		return
	}
	for i, item := range n.Content {
		p := index(path, i)
		d.lines[p] = item.Line + d.offset
		if d.alias(item, p) {
			continue
		}
		fn(item, p)
	}
}

// str decodes a scalar as text. Numbers and booleans are accepted as
// their literal text (as yaml.v3 itself does for string fields); null,
// lists and maps are not.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.fail(n, path, "must be a string, got %s", yamlnode.Describe(n))
		return "", false
	}
	return n.Value, true
}

// nonEmpty is str for values that mean nothing when empty.
func (d *decoder) nonEmpty(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && s == "" {
		d.fail(n, path, "must not be empty")
		return "", false
	}
	return s, ok
}

// integer decodes an integer scalar. A quoted "2" is refused: a typo in a
// limit should be loud.
func (d *decoder) integer(n *yaml.Node, path string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		d.fail(n, path, "must be an integer, got %s", yamlnode.Describe(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil {
		d.fail(n, path, "integer %s is out of range", n.Value)
		return 0, false
	}
	return v, true
}

// atLeast decodes an integer >= min that fits in an int.
func (d *decoder) atLeast(n *yaml.Node, path string, min int64) (int, bool) {
	v, ok := d.integer(n, path)
	if !ok {
		return 0, false
	}
	if v < min {
		d.fail(n, path, "must be >= %d, got %d", min, v)
		return 0, false
	}
	if v > 1<<31-1 {
		d.fail(n, path, "%d is too large", v)
		return 0, false
	}
	return int(v), true
}

// between is atLeast(min) that also refuses values above max.
func (d *decoder) between(n *yaml.Node, path string, min, max int64) (int, bool) {
	v, ok := d.atLeast(n, path, min)
	if ok && int64(v) > max {
		d.fail(n, path, "must be at most %d, got %d", max, v)
		return 0, false
	}
	return v, ok
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		d.fail(n, path, "must be true or false, got %s", yamlnode.Describe(n))
		return false, false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		d.fail(n, path, "must be true or false")
		return false, false
	}
	return v, true
}

// list decodes a list of strings, or one string cut into items by split
// (a convenience for "tools: Read, Write" and "runtime: bin/agent --flag").
func (d *decoder) list(n *yaml.Node, path string, split func(string) []string) ([]string, bool) {
	if n.Kind == yaml.ScalarNode {
		s, ok := d.str(n, path)
		if !ok {
			return nil, false
		}
		return split(s), true
	}
	var out []string
	ok := true
	d.sequence(n, path, func(item *yaml.Node, p string) {
		s, good := d.str(item, p)
		if !good {
			ok = false
			return
		}
		out = append(out, s)
	})
	return out, ok && n.Kind == yaml.SequenceNode
}

// splitComma splits "Read, Write" into its trimmed, non-empty items.
func splitComma(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
