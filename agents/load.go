package agents

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bcpgw/bcpgw/bcp"
)

// Set is a directory of definitions loaded and checked together.
type Set struct {
	Dir      string
	Agents   []*Definition // sorted by name
	Links    []*Link       // one per channel, sorted by controller then reader
	Warnings []*Warning
	// Notes say what was skipped, such as files that are not .md.
	Notes []string

	byName map[string]*Definition
	// links indexes Links by (controller, reader) and toReader holds,
	// for each reader, the subscriptions SubscriptionsFor returns: a push
	// looks its channel and subscription up several times, and a set may
	// hold tens of thousands of agents (see index).
	links    map[linkKey]*Link
	toReader map[string][]*Subscription
	opts     LoadOptions // how it was loaded, for a reload
	// makeDirs are the missing writable directories of TriOnyx
	// definitions (LoadOptions.MakeDirs).
	makeDirs []pendingDir
	// unnamed holds the base names (without .md) of files that failed
	// before their name was known; a peer of that name is probably the
	// broken file, so it is not also reported missing.
	unnamed map[string]bool
}

// Link is a channel seen from both ends: the controller's side and the
// reader's mirror.
type Link struct {
	Controller, Reader         *Definition
	ControllerSide, ReaderSide *Channel

	subs map[string]*Subscription // ControllerSide.Subscriptions by ID
}

// linkKey names a channel by its two ends.
type linkKey struct{ controller, reader string }

// MaxCategory is the channel's effective max category: the smaller of the
// two sides' values.
func (l *Link) MaxCategory() bcp.Category {
	return min(l.ControllerSide.MaxCategory, l.ReaderSide.MaxCategory)
}

// Agent returns the definition named name, or nil.
func (s *Set) Agent(name string) *Definition { return s.byName[name] }

// Link returns the channel between controller and reader, or nil.
func (s *Set) Link(controller, reader string) *Link {
	if s.links == nil { // a Set not built by Load
		for _, l := range s.Links {
			if l.Controller.Name == controller && l.Reader.Name == reader {
				return l
			}
		}
		return nil
	}
	return s.links[linkKey{controller, reader}]
}

// Subscription returns the subscription id that controller declared on its
// channel to reader, or nil.
func (s *Set) Subscription(controller, reader, id string) *Subscription {
	l := s.Link(controller, reader)
	if l == nil {
		return nil
	}
	if l.subs != nil {
		return l.subs[id]
	}
	for _, sub := range l.ControllerSide.Subscriptions {
		if sub.ID == id {
			return sub
		}
	}
	return nil
}

// SubscriptionsFor returns every subscription that targets reader, ordered
// by controller and then declaration order. The slice is the set's own:
// read it, do not change it (appending to it copies).
func (s *Set) SubscriptionsFor(reader string) []*Subscription {
	if s.toReader != nil {
		return s.toReader[reader]
	}
	var out []*Subscription
	for _, l := range s.Links {
		if l.Reader.Name == reader {
			out = append(out, l.ControllerSide.Subscriptions...)
		}
	}
	return out
}

// index builds the maps behind Link, Subscription and SubscriptionsFor
// from Links, once they are final. Links are in controller order, so each
// reader's subscriptions come out ordered by controller, then as
// declared. Where a definition is in error (a channel or subscription
// declared twice) the first one wins, as a scan would find it.
func (s *Set) index() {
	s.links = make(map[linkKey]*Link, len(s.Links))
	s.toReader = map[string][]*Subscription{}
	for _, l := range s.Links {
		k := linkKey{l.Controller.Name, l.Reader.Name}
		if _, dup := s.links[k]; !dup {
			s.links[k] = l
		}
		l.subs = make(map[string]*Subscription, len(l.ControllerSide.Subscriptions))
		for _, sub := range l.ControllerSide.Subscriptions {
			if _, dup := l.subs[sub.ID]; !dup {
				l.subs[sub.ID] = sub
			}
		}
		s.toReader[l.Reader.Name] = append(s.toReader[l.Reader.Name], l.ControllerSide.Subscriptions...)
	}
	for r, subs := range s.toReader {
		s.toReader[r] = slices.Clip(subs) // a caller's append must copy
	}
}

// LoadOptions is what Load needs to know beyond the directory itself.
type LoadOptions struct {
	// StateDir is the gateway's state directory. When set, no workdir or
	// sandbox path may reach into it. Only bcpgw run and check know it;
	// validate applies the rule when given --state.
	StateDir string
	// Compat reads the definitions in another gateway's format: the zero
	// value is bcpgw's own strict format, CompatTriOnyx TriOnyx's (see
	// trionyx.go). The fields below apply to CompatTriOnyx only.
	Compat Compat
	// DefaultRuntime is the runtime of a TriOnyx definition that names
	// none (bcpgw run --default-runtime); TriOnyx has no runtime key.
	DefaultRuntime []string
	// Workspace is TriOnyx's workspace, the root its fs_read and fs_write
	// patterns are written against. Default: the parent of the
	// definitions directory (TriOnyx keeps them in WORKSPACE/agent-definitions).
	Workspace string
	// MakeDirs creates the directories a valid TriOnyx set lets its
	// agents write and that do not exist yet (WORKSPACE/agents/NAME, each
	// DIR of an fs_write DIR/**), 0700, as bcpgw run must before it
	// starts them. Without it (bcpgw validate) nothing is created.
	MakeDirs bool
	// LookupEnv reads the environment the definitions are loaded in (the
	// model API's address, the credentials TriOnyx passes through).
	// Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Options returns the options the set was loaded with, so that a reload
// reads the definitions the same way.
func (s *Set) Options() LoadOptions { return s.opts }

// LoadDir is Load without options: the rules that need the state
// directory are not applied.
func LoadDir(dir string) (*Set, error) { return Load(dir, LoadOptions{}) }

// Load loads every .md file of dir (not recursing) as one set and applies
// the rules that span files: unique names, existing peers, mirror
// channels, effective categories, and the paths agents may use (see
// checkPaths). Other files are skipped with a note. On failure the error
// is a *LoadError with every problem of every file.
func Load(dir string, opts LoadOptions) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read agents directory: %w", err)
	}
	var (
		set  = &Set{Dir: dir, byName: map[string]*Definition{}, unnamed: map[string]bool{}, opts: opts}
		errs []*ParseError
	)
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(name, "."):
			continue // editor and VCS files
		case e.IsDir():
			set.Notes = append(set.Notes, fmt.Sprintf("%s: skipped: a directory (definitions are not searched recursively)", path))
			continue
		case !strings.EqualFold(filepath.Ext(name), ".md"):
			set.Notes = append(set.Notes, fmt.Sprintf("%s: skipped: not a .md file", path))
			continue
		}
		data, err := readFile(path)
		if err != nil {
			errs = append(errs, &ParseError{File: path, Msg: err.Error()})
			set.unnamed[strings.TrimSuffix(name, filepath.Ext(name))] = true
			continue
		}
		def, perrs := set.parseFile(path, data)
		errs = append(errs, perrs...)
		if def == nil || def.Name == "" {
			set.unnamed[strings.TrimSuffix(name, filepath.Ext(name))] = true
			continue
		}
		if first, dup := set.byName[def.Name]; dup {
			errs = append(errs, def.errorf("name", "agent %q is already defined in %s", def.Name, first.File))
			continue
		}
		def.indexChannels()
		set.byName[def.Name] = def
		set.Agents = append(set.Agents, def)
	}
	if len(set.Agents) == 0 && len(errs) == 0 {
		errs = append(errs, &ParseError{File: dir, Msg: "no agent definitions (.md files) found"})
	}
	slices.SortFunc(set.Agents, func(a, b *Definition) int { return cmp.Compare(a.Name, b.Name) })
	if opts.Compat == CompatTriOnyx {
		set.dropUnmirrored() // TriOnyx ignores a channel without its mirror
		for _, d := range set.Agents {
			d.indexChannels() // some of its channels may be gone
		}
	}
	errs = append(errs, set.link()...)
	set.index()
	errs = append(errs, set.checkPaths(opts.StateDir)...)
	if opts.Compat == CompatTriOnyx {
		errs = append(errs, set.finishTriOnyx(len(errs) == 0)...)
	}
	set.warn()
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, &LoadError{Errors: errs, Warnings: set.Warnings, Notes: set.Notes}
	}
	return set, nil
}

// sortErrors orders errors by file, then line.
func sortErrors(errs []*ParseError) {
	slices.SortStableFunc(errs, func(a, b *ParseError) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}

// readFile reads a definition, refusing to read past MaxFileBytes so that
// a huge file costs nothing.
func readFile(path string) ([]byte, error) {
	// Only regular files: opening a FIFO named *.md would block forever.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", unwrapPath(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", unwrapPath(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("file is larger than %d bytes; a definition may be at most that", MaxFileBytes)
	}
	return data, nil
}

// unwrapPath drops the path from an *os.PathError: the ParseError that
// carries the message already names the file.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// errorf returns a ParseError at the line of path in d's file.
func (d *Definition) errorf(path, format string, args ...any) *ParseError {
	return &ParseError{File: d.File, Line: d.lines.line(path), Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (d *Definition) warnf(path, format string, args ...any) *Warning {
	return (*Warning)(d.errorf(path, format, args...))
}

// nearName returns the agent name within two edits of name, if there is
// exactly one: most likely what a typo meant.
func (s *Set) nearName(name string) string {
	found := ""
	for n := range s.byName {
		if editDistance(n, name) <= 2 {
			if found != "" {
				return ""
			}
			found = n
		}
	}
	return found
}

// misspells reports whether d has a channel to an agent that does not
// exist whose name is a likely typo of name.
func (s *Set) misspells(d *Definition, name string) bool {
	for _, c := range d.Channels {
		if s.byName[c.Peer] == nil && !s.unnamed[c.Peer] && s.nearName(c.Peer) == name {
			return true
		}
	}
	return false
}

// editDistance is the Levenshtein distance of a and b, in bytes (agent
// names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// chanPath is the field path of c in its definition.
func chanPath(c *Channel, field string) string {
	return join(index("bcp_channels", c.index), field)
}

// link pairs every channel with its mirror and checks the pair.
func (s *Set) link() []*ParseError {
	var errs []*ParseError
	for _, d := range s.Agents {
		for _, c := range d.Channels {
			if c.Peer == "" || c.Role == "" || c.Peer == d.Name || c.dup {
				continue // already reported by Parse
			}
			peer := s.byName[c.Peer]
			if peer == nil && s.unnamed[c.Peer] {
				continue // its file failed to parse; that error comes first
			}
			if peer == nil {
				msg := fmt.Sprintf("no agent named %q in %s", c.Peer, s.Dir)
				if near := s.nearName(c.Peer); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				}
				errs = append(errs, d.errorf(chanPath(c, "peer"), "%s", msg))
				continue
			}
			mirror := peer.Channel(d.Name)
			if mirror == nil && peer.broken {
				continue // the peer's own errors come first
			}
			if mirror == nil && s.misspells(peer, d.Name) {
				continue // the peer's channel names d with a typo: that error is the cause
			}
			if mirror == nil {
				errs = append(errs, d.errorf(chanPath(c, "peer"), "%s has no channel back to %s: add {peer: %s, role: %s} to its bcp_channels in %s",
					peer.Name, d.Name, d.Name, c.Role.Opposite(), peer.File))
				continue
			}
			if mirror.Role == c.Role {
				// Report once per pair, on the side that sorts first.
				if d.Name < peer.Name {
					errs = append(errs, d.errorf(chanPath(c, "role"), "both %s and %s say role %s; one side must be controller and the other reader",
						d.Name, peer.Name, c.Role))
				}
				continue
			}
			if c.Role != RoleController {
				continue
			}
			l := &Link{Controller: d, Reader: peer, ControllerSide: c, ReaderSide: mirror}
			s.Links = append(s.Links, l)
			errs = append(errs, s.checkLink(l)...)
		}
	}
	return errs
}

// checkLink applies the rules that need both sides of a channel.
func (s *Set) checkLink(l *Link) []*ParseError {
	var errs []*ParseError
	eff := l.MaxCategory()
	for _, sub := range l.ControllerSide.Subscriptions {
		sub.Controller, sub.Reader = l.Controller.Name, l.Reader.Name
		// A side whose max_category was refused (0) has its own error.
		if eff.Valid() && sub.Spec.Category > eff && sub.Spec.Category <= l.ControllerSide.MaxCategory {
			errs = append(errs, l.Controller.errorf(join(sub.path, "category"),
				"%d exceeds the channel's effective max_category %d (%s allows at most %d in %s)",
				sub.Spec.Category, eff, l.Reader.Name, l.ReaderSide.MaxCategory, l.Reader.File))
		}
	}
	return errs
}

// warn gathers the problems that do not stop a set from loading.
func (s *Set) warn() {
	w := func(x *Warning) { s.Warnings = append(s.Warnings, x) }
	for _, d := range s.Agents {
		for _, t := range d.Tools {
			if strings.HasPrefix(strings.ToUpper(t), "BCP") && t != ToolQuery && t != ToolRespond && t != ToolPublish && t != ToolSubscribe {
				w(d.warnf("tools", "%q is not a BCP tool (BCPQuery, BCPRespond, BCPPublish, BCPSubscribe); it grants no protocol right", t))
			}
		}
		// A Controller that only receives pushes needs no BCPQuery, and
		// then its query counters do not matter: only a channel that can
		// carry nothing, or query rights it cannot use, are warned about.
		queries := d.HasTool(ToolQuery)
		for _, c := range d.Channels {
			if c.Role != RoleController {
				continue
			}
			switch {
			case !queries && len(c.Subscriptions) == 0:
				w(d.warnf(chanPath(c, "peer"), "%s controls the channel to %s but has no subscriptions on it and lacks the %s tool: nothing can pass on it",
					d.Name, c.Peer, ToolQuery))
			case queries && c.MaxCategory >= bcp.Cat2 && c.MaxCat2Queries == 0:
				w(d.warnf(chanPath(c, "max_category"), "max_category %d allows Cat-2 but max_cat2_queries is 0: Cat-2 queries to %s will be refused", c.MaxCategory, c.Peer))
			}
		}
		if d.HasTool(ToolSubscribe) && !d.holds(RoleController) {
			w(d.warnf("tools", "%s holds %s but controls no channel: it has no Reader to ask a subscription of", d.Name, ToolSubscribe))
		}
		if n := len(s.SubscriptionsFor(d.Name)); n > 0 && !d.HasTool(ToolPublish) {
			w(d.warnf("tools", "%d subscription(s) target %s but it lacks the %s tool: it cannot publish to them", n, d.Name, ToolPublish))
		}
	}
	for _, l := range s.Links {
		if l.Controller.HasTool(ToolQuery) && !l.Reader.HasTool(ToolRespond) {
			w(l.Reader.warnf("tools", "%s may query %s (%s) but %s lacks the %s tool: its answers would be refused, so each query would be charged and then time out",
				l.Controller.Name, l.Reader.Name, ToolQuery, l.Reader.Name, ToolRespond))
		}
		for _, sub := range l.ControllerSide.Subscriptions {
			for _, side := range []struct {
				def *Definition
				ch  *Channel
			}{{l.Controller, l.ControllerSide}, {l.Reader, l.ReaderSide}} {
				// A missing budget (0) is already an error.
				if side.ch.BudgetBits > 0 && sub.Bits > float64(side.ch.BudgetBits) {
					w(l.Controller.warnf(sub.path, "%s costs %s per push, more than %s's budget_bits %d: it can never be delivered",
						sub.ID, bcp.FormatBits(sub.Bits), side.def.Name, side.ch.BudgetBits))
				}
			}
		}
	}
	slices.SortStableFunc(s.Warnings, func(a, b *Warning) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}
