package agents_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

// docPages are the pages whose YAML examples TestDocsDefinitions loads,
// relative to the repository's root.
var docPages = []string{"docs/definitions.md", "docs/concepts.md", "README.md"}

// yamlBlock is one ```yaml block of a page.
type yamlBlock struct {
	page string
	line int    // the line of the opening fence; the block's first line is line+1
	set  string // from a "<!-- set: NAME -->" line just before the fence
	text string
}

// complete reports whether the block is a whole definition file.
func (b yamlBlock) complete() bool { return strings.HasPrefix(b.text, "---\n") }

// docSetMark groups complete definitions that are loaded as one directory.
var docSetMark = regexp.MustCompile(`^<!--\s*set:\s*([a-z0-9-]+)\s*-->$`)

// yamlBlocks returns the ```yaml blocks of a Markdown page.
func yamlBlocks(t *testing.T, page string) []yamlBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", page))
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []yamlBlock
		cur     *yamlBlock
		indent  string
		inFence bool
		prev    string
		body    strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inFence && strings.HasPrefix(trimmed, "```"):
			inFence = true
			if strings.TrimSpace(strings.TrimPrefix(trimmed, "```")) == "yaml" {
				cur = &yamlBlock{page: page, line: n}
				indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
				if m := docSetMark.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
					cur.set = m[1]
				}
				body.Reset()
			}
		case inFence && trimmed == "```":
			inFence = false
			if cur != nil {
				cur.text = body.String()
				blocks = append(blocks, *cur)
				cur = nil
			}
		case cur != nil:
			body.WriteString(strings.TrimPrefix(line, indent))
			body.WriteByte('\n')
		}
		prev = line
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if inFence {
		t.Fatalf("%s: a code block is not closed", page)
	}
	return blocks
}

// TestDocsDefinitions loads every YAML example of the definition pages with
// the real loader, so that the pages cannot drift from the code:
//
//   - a ```yaml block that starts with a --- line is a complete definition
//     file. It is loaded with agents.Load, alone, or together with the
//     blocks marked with the same "<!-- set: NAME -->" line just before
//     their fence (a Controller needs its Reader). It must load with no
//     error and no warning;
//   - any other ```yaml block is part of a frontmatter. It is put between
//     --- lines, with a name and a runtime when it has none, and parsed with
//     agents.Parse: the rules of one file (peers are not looked up).
//
// A failure names the page and the line in it.
func TestDocsDefinitions(t *testing.T) {
	sets := map[string][]yamlBlock{}
	var setOrder []string
	complete, parts := 0, 0
	for _, page := range docPages {
		for _, b := range yamlBlocks(t, page) {
			switch {
			case b.complete() && b.set != "":
				if sets[b.set] == nil {
					setOrder = append(setOrder, b.set)
				}
				sets[b.set] = append(sets[b.set], b)
				complete++
			case b.complete():
				loadDocSet(t, "", []yamlBlock{b})
				complete++
			default:
				parseDocPart(t, b)
				parts++
			}
		}
	}
	loaded := map[string]*agents.Set{}
	for _, name := range setOrder {
		loaded[name] = loadDocSet(t, name, sets[name])
	}
	if complete == 0 || parts == 0 {
		t.Errorf("found %d complete definitions and %d parts in %v; the pages have both", complete, parts, docPages)
	}

	// The annotated pair of definitions.md: a Controller and its Reader.
	if n := len(sets["first-pair"]); n != 2 {
		t.Fatalf("docs/definitions.md: the set first-pair has %d blocks, want the annotated Controller and Reader", n)
	}
	if set := loaded["first-pair"]; set != nil && len(set.Links) != 1 {
		t.Errorf("docs/definitions.md: first-pair has %d channels, want 1", len(set.Links))
	}
	// The README's "Your first agent pair".
	if set := loaded["readme-pair"]; set == nil || len(set.Links) != 1 {
		t.Errorf("README.md: the set readme-pair does not load as one channel (%d blocks)", len(sets["readme-pair"]))
	}
}

// loadDocSet writes blocks as the files of one directory and loads it with
// agents.Load; problems are reported at the pages' lines. It returns the
// set, or nil on failure.
func loadDocSet(t *testing.T, name string, blocks []yamlBlock) *agents.Set {
	t.Helper()
	dir := t.TempDir()
	at := map[string]yamlBlock{} // file path -> its block
	for _, b := range blocks {
		path := filepath.Join(dir, fmt.Sprintf("line%d.md", b.line))
		if err := os.WriteFile(path, []byte(b.text), 0o600); err != nil {
			t.Fatal(err)
		}
		at[path] = b
	}
	where := func(file string, line int) string {
		b, ok := at[file]
		if !ok {
			return file
		}
		return fmt.Sprintf("%s:%d", b.page, b.line+line)
	}
	what := "example"
	if name != "" {
		what = "set " + name
	}
	set, err := agents.Load(dir, agents.LoadOptions{})
	var le *agents.LoadError
	switch {
	case errors.As(err, &le):
		for _, e := range le.Errors {
			t.Errorf("%s: %s: does not load: %s: %s", where(e.File, e.Line), what, e.Path, e.Msg)
		}
		return nil
	case err != nil:
		t.Errorf("%s: %v", what, err)
		return nil
	}
	for _, w := range set.Warnings {
		t.Errorf("%s: %s: warning: %s: %s", where(w.File, w.Line), what, w.Path, w.Msg)
	}
	return set
}

// topKey finds the keys of a YAML block's top level.
var topKey = regexp.MustCompile(`(?m)^([a-z_]+):`)

// parseDocPart parses a part of a frontmatter as a definition of its own.
func parseDocPart(t *testing.T, b yamlBlock) {
	t.Helper()
	keys := map[string]bool{}
	for _, m := range topKey.FindAllStringSubmatch(b.text, -1) {
		keys[m[1]] = true
	}
	head := "---\n"
	if !keys["name"] {
		head += "name: doc-example\n"
	}
	if !keys["runtime"] {
		head += "runtime: [bin/agent]\n"
	}
	headLines := strings.Count(head, "\n")
	file := filepath.Join(t.TempDir(), "part.md")
	_, err := agents.Parse(file, []byte(head+b.text+"---\n"))
	var le *agents.LoadError
	switch {
	case errors.As(err, &le):
		for _, e := range le.Errors {
			line := b.line
			if e.Line > headLines {
				line += e.Line - headLines
			}
			t.Errorf("%s:%d: example does not parse: %s: %s", b.page, line, e.Path, e.Msg)
		}
	case err != nil:
		t.Errorf("%s:%d: %v", b.page, b.line, err)
	}
}

// TestDocsEveryKey checks that definitions.md names every key the parser
// knows, at every level: a key added to the code needs its entry there.
// The parser lists the keys it knows when it meets an unknown one.
func TestDocsEveryKey(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "docs", "definitions.md"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		head = "---\nname: a\nruntime: [x]\n"
		ch   = "bcp_channels: [{peer: b, role: controller, max_category: 2, budget_bits: 100"
	)
	levels := []struct{ name, src string }{
		{"top-level", head + "zz_unknown: 1\n---\n"},
		{"bcp_channels[]", head + ch + ", zz_unknown: 1}]\n---\n"},
		{"subscriptions[]", head + ch + ", subscriptions: [{id: s, category: 1, fields: [{name: f, type: boolean}], zz_unknown: 1}]}]\n---\n"},
		{"fields[]", head + ch + ", subscriptions: [{id: s, category: 1, fields: [{name: f, type: boolean, zz_unknown: 1}]}]}]\n---\n"},
		{"questions[]", head + ch + ", subscriptions: [{id: s, category: 2, questions: [{id: q, question: q, max_words: 1, zz_unknown: 1}]}]}]\n---\n"},
		{"cron_schedules[]", head + "cron_schedules: [{schedule: '@hourly', message: m, zz_unknown: 1}]\n---\n"},
		{"sandbox", head + "sandbox: {zz_unknown: 1}\n---\n"},
		{"flood_limit", head + "flood_limit: {zz_unknown: 1}\n---\n"},
		{"approvals", head + ch + ", approvals: {zz_unknown: 1}}]\n---\n"},
	}
	known := regexp.MustCompile(`zz_unknown: unknown field \(known: ([^)]*)\)`)
	for _, l := range levels {
		_, err := agents.Parse("a.md", []byte(l.src))
		var m []string
		if err != nil {
			m = known.FindStringSubmatch(err.Error())
		}
		if m == nil {
			t.Errorf("%s: cannot read the known keys from the parser's error %v", l.name, err)
			continue
		}
		for _, key := range strings.Split(m[1], ", ") {
			if !bytes.Contains(page, []byte("`"+key+"`")) {
				t.Errorf("docs/definitions.md does not document the %s key `%s`", l.name, key)
			}
		}
	}
}
