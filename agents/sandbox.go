package agents

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
	"github.com/bcpgw/bcpgw/internal/yamlnode"
)

// sandbox decodes the sandbox key: the scalar none, or a map of
// read_only, read_write and network.
func (d *decoder) sandbox(n *yaml.Node, path string, def *Definition) {
	sb := &def.Sandbox
	if n.Kind == yaml.ScalarNode {
		switch {
		case n.Tag == "!!str" && n.Value == "none":
			sb.None = true
		case n.Tag == "!!str":
			d.fail(n, path, "must be none or a map of read_only, read_write and network, got %q", n.Value)
		default:
			d.fail(n, path, "must be none or a map of read_only, read_write and network, got %s", yamlnode.Describe(n))
		}
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be none or a map of read_only, read_write and network, got %s", yamlnode.Describe(n))
		return
	}
	readOnly := map[string]string{} // path -> its field path
	d.mapping(n, path, fields{
		"read_only": func(n *yaml.Node, p string) {
			d.paths(n, p, func(dir, at string) {
				sb.ReadOnly = append(sb.ReadOnly, dir)
				def.readOnlyAt = append(def.readOnlyAt, at)
				readOnly[dir] = at
			})
		},
		"read_write": func(n *yaml.Node, p string) {
			d.paths(n, p, func(dir, at string) {
				sb.ReadWrite = append(sb.ReadWrite, dir)
				def.readWriteAt = append(def.readWriteAt, at)
			})
		},
		"network": func(n *yaml.Node, p string) { sb.Network = d.network(n, p) },
	})
	// Checked after the walk, whatever order the keys were written in.
	for i, dir := range sb.ReadWrite {
		if first, both := readOnly[dir]; both {
			at := def.readWriteAt[i]
			d.errorf(d.lines.line(at), at, "%s is also read-only (%s); list a path once, in read_write if the runtime must write it", dir, first)
		}
	}
}

// paths decodes a list of sandbox paths, calling add with each good one
// (absolute and cleaned) and its field path. Duplicates are errors.
func (d *decoder) paths(n *yaml.Node, path string, add func(dir, at string)) {
	seen := map[string]string{}
	d.sequence(n, path, func(item *yaml.Node, ip string) {
		s, ok := d.str(item, ip)
		if !ok {
			return
		}
		dir, ok := d.localPath(item, ip, s)
		if !ok {
			return
		}
		if first, dup := seen[dir]; dup {
			d.fail(item, ip, "%s is listed twice (also %s)", dir, first)
			return
		}
		seen[dir] = ip
		add(dir, ip)
	})
}

// localPath resolves a path written in a definition: relative ones
// against the definition file's directory; the result is absolute and
// cleaned. Empty, NUL and the root are refused: each would either mean
// nothing or expose everything.
func (d *decoder) localPath(n *yaml.Node, path, s string) (string, bool) {
	switch {
	case s == "":
		d.fail(n, path, "must not be empty")
		return "", false
	case strings.ContainsRune(s, 0):
		d.fail(n, path, "must not contain a NUL character")
		return "", false
	}
	p := s
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(d.file), p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		d.fail(n, path, "cannot resolve %q: %v", s, err)
		return "", false
	}
	if abs == string(filepath.Separator) {
		d.fail(n, path, "%q is the root directory: name the directories the runtime needs", s)
		return "", false
	}
	return abs, true
}

// network decodes sandbox.network: none, host or a list of destinations.
func (d *decoder) network(n *yaml.Node, path string) Network {
	none := Network{Mode: NetworkNone}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag != "!!str" {
			d.fail(n, path, "must be none, host or a list of destinations, got %s", yamlnode.Describe(n))
			return none
		}
		switch NetworkMode(n.Value) {
		case NetworkNone, NetworkHost:
			return Network{Mode: NetworkMode(n.Value)}
		}
		if _, err := netpolicy.Parse(n.Value); err == nil {
			d.fail(n, path, "must be none, host or a list of destinations: write [%s] for one destination", n.Value)
			return none
		}
		d.fail(n, path, "must be none, host or a list of destinations, got %q", n.Value)
		return none
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			d.fail(n, path, "an empty list allows nothing: write none for no network")
			return none
		}
	default:
		d.fail(n, path, "must be none, host or a list of destinations, got %s", yamlnode.Describe(n))
		return none
	}
	nw := Network{Mode: NetworkProxy}
	seen := map[string]string{}
	d.sequence(n, path, func(item *yaml.Node, ip string) {
		s, ok := d.str(item, ip)
		if !ok {
			return
		}
		if m := NetworkMode(s); m == NetworkNone || m == NetworkHost {
			d.fail(item, ip, "%q in a list would be a host name; for the mode write network: %s", s, s)
			return
		}
		dest, err := netpolicy.Parse(s)
		if err != nil {
			d.fail(item, ip, "%v", err)
			return
		}
		if first, dup := seen[dest.String()]; dup {
			d.fail(item, ip, "%s is listed twice (also %s)", dest, first)
			return
		}
		seen[dest.String()] = ip
		nw.Allow = append(nw.Allow, dest)
	})
	return nw
}

// Unsandboxed returns the agents whose definition says sandbox: none,
// sorted by name. Such a set is valid, but bcpgw run refuses it unless the
// operator explicitly allows it: one unsandboxed runtime can reach around
// every guarantee the gateway gives on the pipe.
func (s *Set) Unsandboxed() []*Definition {
	var out []*Definition
	for _, d := range s.Agents {
		if d.Sandbox.None {
			out = append(out, d)
		}
	}
	return out
}

// place is a directory named in a definition (or the set's own
// directories), in both of the forms the path rules compare.
type place struct {
	def  *Definition // nil for the agents and state directories
	at   string      // its field path, e.g. "sandbox.read_write[0]"
	dir  string      // absolute and cleaned
	real string      // dir with symlinks resolved as far as it exists
	dflt bool        // the default workdir, which the definition does not name
	ro   bool        // a read_only path
	seq  int         // its number in checkPaths, which orders errors
}

func newPlace(def *Definition, at, dir string) place {
	return place{def: def, at: at, dir: dir, real: resolve(dir)}
}

// resolve follows the symlinks of dir's longest existing prefix, so that
// a path that does not exist yet, below a symlink, is still compared
// where it would really be.
func resolve(dir string) string {
	rest := ""
	for p := dir; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		if p == filepath.Dir(p) {
			return dir
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// relation says how a relates to b: "is", "is inside", "contains", or ""
// when neither holds.
func relation(a, b string) string {
	inside := func(p, dir string) bool {
		return dir == string(filepath.Separator) || strings.HasPrefix(p, dir+string(filepath.Separator))
	}
	switch {
	case a == b:
		return "is"
	case inside(a, b):
		return "is inside"
	case inside(b, a):
		return "contains"
	}
	return ""
}

// overlap compares a and b as written and with symlinks resolved. It
// returns the relation and how to show the two paths in a message: as
// written, or with what they resolve to when only that form overlaps.
func overlap(a, b place) (rel, aText, bText string) {
	return relate(a, b, func(rel string) bool { return rel != "" })
}

// relate is overlap for the relations ok accepts: it returns the first
// of a's relations to b, as written, both resolved, or one of the two
// resolved, that ok accepts, or "" when none does.
func relate(a, b place, ok func(rel string) bool) (rel, aText, bText string) {
	show := func(p place, resolved bool) string {
		if resolved && p.real != p.dir {
			return fmt.Sprintf("%s (through symlinks %s)", p.dir, p.real)
		}
		return p.dir
	}
	for _, f := range []struct{ ar, br bool }{{false, false}, {true, true}, {false, true}, {true, false}} {
		x, y := a.dir, b.dir
		if f.ar {
			x = a.real
		}
		if f.br {
			y = b.real
		}
		if rel := relation(x, y); rel != "" && ok(rel) {
			return rel, show(a, f.ar), show(b, f.br)
		}
	}
	return "", "", ""
}

// absDir makes a directory given on the command line absolute; on failure
// (no working directory) it is compared as given.
func absDir(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return filepath.Clean(dir)
}

// checkPaths applies the rules that keep runtimes away from the gateway's
// own files and from each other (PROTOCOL.md section 2). A path is
// compared cleaned and absolute, as written and with symlinks resolved.
// An agent's writable paths are its workdir and its read_write paths;
// its default workdir (STATE/work/NAME) counts only when the state
// directory is known.
//   - a workdir or read_write path may not contain or lie inside the
//     agents directory (a runtime could rewrite definitions, its own
//     limits included) nor the state directory (the store, the control
//     socket and the other agents' default workdirs);
//   - a read_only path may not contain the agents directory, nor contain or
//     lie inside the state directory: both must stay invisible inside a
//     sandbox (section 8), and the store keeps every payload, rejected
//     ones included, which a Controller must never read;
//   - a sandboxed agent's workdir, read_only and read_write paths may not
//     be or lie inside /proc, /sys, /dev or /run: the sandbox has its own
//     /proc and /dev, and the host's expose the gateway;
//   - a Reader's writable paths may not overlap any Controller's paths
//     (workdir, read_only, read_write): a file the Reader writes and the
//     Controller reads would be a channel around the gateway;
//   - a Reader's read_only paths may not overlap a Controller's writable
//     paths: the Reader would read what the Controller keeps;
//   - the writable paths of two sandboxed agents may not overlap: each
//     agent's are its own (a gateway running as root gives them to the
//     agent's uid);
//   - no agent's path may lie strictly inside a sandboxed agent's
//     writable path, its own included: the gateway resolves every path,
//     symlinks followed, each time it builds a sandbox, so a runtime that
//     can write a directory could replace a directory below it with a
//     symlink and redirect the path;
//   - no agent's runtime program (when it is a path) nor an absolute
//     runtime argument may be or lie inside another sandboxed agent's
//     writable path: that agent could change the code the other runs.
//
// A sandbox: none agent is never the writer in these rules (it can reach
// everything anyway), but its paths and its runtime count as anyone's.
// A pair of paths is reported once, by the first of the last four rules
// (in that order) that refuses it, and not at all when it was reported by
// the Reader rule before them; a path refused on its own (agents, state
// or system directory) takes no part in those four. A path that overlaps
// a default workdir overlaps the state directory and is reported as such,
// so default workdirs take part only in the runtime rule. Paths are
// looked up in indexes, not compared pair by pair: a set of thousands of
// agents is checked in time proportional to its paths and their
// conflicts. stateDir is empty when the state directory is not known
// (bcpgw validate without --state).
func (s *Set) checkPaths(stateDir string) []*ParseError {
	type guarded struct {
		place
		name string // "agents directory", "state directory"
		why  string
	}
	var dirs []guarded
	if s.Dir != "" {
		dirs = append(dirs, guarded{newPlace(nil, "", absDir(s.Dir)), "agents directory", "a runtime must not be able to change definitions"})
	}
	if stateDir != "" {
		dirs = append(dirs, guarded{newPlace(nil, "", absDir(stateDir)), "state directory", "it holds the gateway's store, its control socket and the agents' own workdirs"})
	}
	var system []place
	for _, dir := range systemDirs {
		system = append(system, newPlace(nil, "", dir))
	}

	// Every agent's places, each resolved once, numbered in agent order
	// (writable, read-only, default workdir, runtime): errors come out in
	// that order, and the indexes find the places near a path without
	// comparing every pair of agents.
	type agentPlaces struct {
		writable, readOnly, runtime []place
		dflt                        []place // the default workdir, when it counts
	}
	seq := 0
	number := func(ps []place) []place {
		for i := range ps {
			ps[i].seq = seq
			seq++
		}
		return ps
	}
	of := make(map[*Definition]*agentPlaces, len(s.Agents))
	var named, writables []place // every path written; every writable path
	for _, d := range s.Agents {
		ap := &agentPlaces{writable: number(writable(d)), readOnly: number(readOnly(d))}
		if d.Workdir == "" && stateDir != "" && !d.Sandbox.None {
			p := newPlace(d, "workdir", DefaultWorkdir(absDir(stateDir), d.Name))
			p.dflt = true
			ap.dflt = number([]place{p})
		}
		ap.runtime = number(runtimePaths(d))
		of[d] = ap
		named = append(append(named, ap.writable...), ap.readOnly...)
		writables = append(append(writables, ap.writable...), ap.dflt...)
	}
	// Two indexes, so that a path many agents read (a models directory)
	// is not a candidate wherever only writable paths count.
	namedIndex, writableIndex := newPathIndex(named), newPathIndex(writables)

	var errs []*ParseError
	// Places refused on their own are left out of the rules between two
	// places (but the first of those, kept as it always was): their
	// errors already say what to change.
	refused := map[placeKey]bool{}
	for _, d := range s.Agents {
		for _, p := range of[d].writable {
			for _, g := range dirs {
				if rel, a, b := overlap(p, g.place); rel != "" {
					errs = append(errs, d.errorf(p.at, "%s %s the %s %s: %s; choose a directory outside it%s",
						a, rel, g.name, b, g.why, leaveOut(p)))
					refused[p.key()] = true
				}
			}
		}
		for _, p := range of[d].readOnly {
			for _, g := range dirs {
				rel, a, b := overlap(p, g.place)
				if rel == "" || (g.name == "agents directory" && rel == "is inside") {
					continue // a subdirectory of the agents directory holds no definitions
				}
				errs = append(errs, d.errorf(p.at, "%s %s the %s %s: it must not be visible inside a sandbox; name the directories the runtime needs", a, rel, g.name, b))
				refused[p.key()] = true
			}
		}
		if d.Sandbox.None {
			continue
		}
		for _, p := range slices.Concat(of[d].writable, of[d].readOnly) {
			for _, sys := range system {
				if rel, a, b := relate(p, sys, within); rel != "" {
					errs = append(errs, d.errorf(p.at, "%s %s the host's %s: the sandbox has its own /proc and /dev, and the host's /proc, /sys, /dev and /run expose the gateway and the system; name another directory",
						a, rel, b))
					refused[p.key()] = true
					break
				}
			}
		}
	}

	reported := map[[2]placeKey]bool{}
	report := func(a, b place) bool { // false if the pair was reported already
		ka, kb := a.key(), b.key()
		if reported[[2]placeKey{ka, kb}] || reported[[2]placeKey{kb, ka}] {
			return false
		}
		reported[[2]placeKey{ka, kb}] = true
		return true
	}
	fresh := func(ps ...place) bool { // none of ps was refused on its own
		for _, p := range ps {
			if refused[p.key()] {
				return false
			}
		}
		return true
	}
	// pair is a path of one agent (mine) near a path of another (theirs).
	type pair struct{ mine, theirs place }
	// near returns the pairs of each of mine with the places the index
	// holds that keep returns true for, ordered by the other agent, then
	// mine, then theirs (the order of nested loops over agents).
	near := func(ix *pathIndex, mine []place, below bool, keep func(m, t place) bool) []pair {
		var out []pair
		for _, m := range mine {
			for _, t := range ix.near(m, below) {
				if keep(m, t) {
					out = append(out, pair{m, t})
				}
			}
		}
		slices.SortStableFunc(out, func(a, b pair) int {
			return cmp.Or(strings.Compare(a.theirs.def.Name, b.theirs.def.Name), cmp.Compare(a.mine.seq, b.mine.seq), cmp.Compare(a.theirs.seq, b.theirs.seq))
		})
		return out
	}
	controller := func(r *Definition) func(m, t place) bool { // t is a Controller's explicit path
		return func(_, t place) bool { return t.def != r && !t.dflt && t.def.holds(RoleController) }
	}

	// A Reader's writable paths and any Controller's paths.
	for _, r := range s.Agents {
		if !r.holds(RoleReader) {
			continue
		}
		for _, x := range near(namedIndex, of[r].writable, true, controller(r)) {
			if rel, a, b := overlap(x.mine, x.theirs); rel != "" {
				report(x.mine, x.theirs) // always reported, as before the other rules
				errs = append(errs, r.errorf(x.mine.at, "reader %s may write %s, which %s %s (%s): what a Reader writes must reach a Controller only through the gateway",
					r.Name, a, rel, b, whose(x.theirs, "controller")))
			}
		}
	}
	// A Reader's read-only paths and a Controller's writable paths.
	for _, r := range s.Agents {
		if !r.holds(RoleReader) {
			continue
		}
		isController := controller(r)
		for _, x := range near(writableIndex, of[r].readOnly, true, isController) {
			if rel, a, b := overlap(x.mine, x.theirs); rel != "" && report(x.mine, x.theirs) {
				errs = append(errs, r.errorf(x.mine.at, "reader %s may read %s, which %s %s (%s): what a Controller keeps must reach a Reader only through the gateway",
					r.Name, a, rel, b, whose(x.theirs, "controller")))
			}
		}
	}
	// The writable paths of two sandboxed agents, reported at the later.
	writer := func(t place) bool { return !t.dflt && !t.def.Sandbox.None }
	for _, b := range s.Agents {
		if b.Sandbox.None {
			continue
		}
		for _, x := range near(writableIndex, of[b].writable, true, func(_, t place) bool { return writer(t) && t.def.Name < b.Name }) {
			if rel, y, z := overlap(x.mine, x.theirs); rel != "" && fresh(x.mine, x.theirs) && report(x.mine, x.theirs) {
				errs = append(errs, b.errorf(x.mine.at, "agent %s may write %s, which %s %s (%s): each agent's writable paths must be its own "+
					"(a gateway running as root gives them to the agent's uid); choose paths that do not overlap",
					b.Name, y, rel, z, whose(x.theirs, "agent")))
			}
		}
	}
	// Any path strictly inside a sandboxed agent's writable path.
	strictlyInside := func(rel string) bool { return rel == "is inside" }
	for _, d := range s.Agents {
		mine := slices.Concat(of[d].writable, of[d].readOnly)
		var found []pair
		for _, m := range mine {
			for _, t := range writableIndex.near(m, false) {
				if writer(t) {
					found = append(found, pair{m, t})
				}
			}
		}
		for _, x := range found {
			t, wp, w := x.mine, x.theirs, x.theirs.def
			rel, a, b := relate(t, wp, strictlyInside)
			if rel == "" || !fresh(t, wp) || !report(t, wp) {
				continue
			}
			if w == d {
				errs = append(errs, d.errorf(t.at, "agent %s may %s %s, which is inside %s (its own %s, writable): its runtime could replace a directory on the way with a symlink "+
					"and redirect this path the next time its sandbox is built; choose a path outside it (what lies inside is already visible, and writable, through it)",
					d.Name, verb(t), a, b, wp.at))
				continue
			}
			errs = append(errs, d.errorf(t.at, "agent %s may %s %s, which is inside %s (%s), writable by %s: %s's runtime could replace a directory on the way with a symlink "+
				"and redirect this path the next time a runtime starts; choose a path outside it",
				d.Name, verb(t), a, b, whose(wp, "agent"), w.Name, w.Name))
		}
	}
	// Runtime programs and arguments inside another agent's writable path.
	for _, d := range s.Agents {
		for _, p := range of[d].runtime {
			for _, wp := range writableIndex.near(p, false) {
				w := wp.def
				if w == d || w.Sandbox.None {
					continue // in its own: visible through that bind, not bound apart
				}
				if rel, a, b := relate(p, wp, within); rel != "" && fresh(wp) {
					what := "runtime argument"
					if p.at == "runtime[0]" {
						what = "runtime program"
					}
					errs = append(errs, d.errorf(p.at, "%s %s of agent %s %s %s (%s), writable by %s: %s's runtime could change what %s runs; install it outside every other agent's writable paths",
						what, a, d.Name, rel, b, whose(wp, "agent"), w.Name, w.Name, d.Name))
				}
			}
		}
	}
	return errs
}

// pathIndex finds, among many places, those near a path: at it, above
// it, or below it, in either of their forms.
type pathIndex struct {
	places []place
	at     map[string][]int // a form (dir or real) -> indexes into places
	forms  []string         // the keys of at, sorted
}

func newPathIndex(places []place) *pathIndex {
	ix := &pathIndex{places: places, at: map[string][]int{}}
	for i, p := range places {
		ix.at[p.dir] = append(ix.at[p.dir], i)
		if p.real != p.dir {
			ix.at[p.real] = append(ix.at[p.real], i)
		}
	}
	for f := range ix.at {
		ix.forms = append(ix.forms, f)
	}
	slices.Sort(ix.forms)
	return ix
}

// near returns, in index order, the places with a form that either form
// of q is or lies inside, and with below also those with a form inside
// one of q's: every place relate could find related to q, and a few more.
func (ix *pathIndex) near(q place, below bool) []place {
	var hits []int
	for _, x := range []string{q.dir, q.real} {
		for p := x; ; p = filepath.Dir(p) {
			hits = append(hits, ix.at[p]...)
			if p == filepath.Dir(p) {
				break
			}
		}
		if below {
			prefix := x + string(filepath.Separator)
			if x == string(filepath.Separator) {
				prefix = x
			}
			for i, _ := slices.BinarySearch(ix.forms, prefix); i < len(ix.forms) && strings.HasPrefix(ix.forms[i], prefix); i++ {
				hits = append(hits, ix.at[ix.forms[i]]...)
			}
		}
	}
	slices.Sort(hits)
	hits = slices.Compact(hits)
	out := make([]place, len(hits))
	for i, h := range hits {
		out[i] = ix.places[h]
	}
	return out
}

// verb says what an agent may do with p: read or write.
func verb(p place) string {
	if p.ro {
		return "read"
	}
	return "write"
}

// systemDirs are the host directories no sandbox path may be or lie in.
var systemDirs = []string{"/proc", "/sys", "/dev", "/run"}

// within holds for a path that is, or lies inside, the other.
func within(rel string) bool { return rel == "is" || rel == "is inside" }

// placeKey identifies a place in the set, to report each pair once.
type placeKey struct {
	def *Definition
	at  string
}

func (p place) key() placeKey { return placeKey{p.def, p.at} }

// whose describes p for a message about another agent's path: its field
// path, the agent as role (e.g. "controller main") and where it is
// written.
func whose(p place, role string) string {
	if p.dflt {
		return fmt.Sprintf("default workdir of %s %s, under the state directory", role, p.def.Name)
	}
	return fmt.Sprintf("%s of %s %s, %s:%d", p.at, role, p.def.Name, p.def.File, p.def.lines.line(p.at))
}

// runtimePaths returns d's runtime program when it is a path (absolute,
// or relative with a slash and resolved against the definition's
// directory, as the gateway resolves it), then its absolute arguments.
func runtimePaths(d *Definition) []place {
	var out []place
	for i, arg := range d.Runtime {
		switch {
		case arg == "" || strings.ContainsRune(arg, 0):
			continue
		case filepath.IsAbs(arg):
			out = append(out, newPlace(d, index("runtime", i), filepath.Clean(arg)))
		case i == 0 && strings.Contains(arg, "/"):
			if abs, err := filepath.Abs(filepath.Join(filepath.Dir(d.File), arg)); err == nil {
				out = append(out, newPlace(d, index("runtime", i), abs))
			}
		}
	}
	return out
}

// leaveOut suggests the default for a workdir.
func leaveOut(p place) string {
	if p.at == "workdir" {
		return ", or leave workdir out for one of its own under the state directory"
	}
	return ""
}

// writable returns d's explicit workdir and read_write paths.
func writable(d *Definition) []place {
	var out []place
	if d.Workdir != "" {
		out = append(out, newPlace(d, "workdir", d.Workdir))
	}
	for i, dir := range d.Sandbox.ReadWrite {
		out = append(out, newPlace(d, d.readWriteAt[i], dir))
	}
	return out
}

// readOnly returns d's read_only paths.
func readOnly(d *Definition) []place {
	var out []place
	for i, dir := range d.Sandbox.ReadOnly {
		p := newPlace(d, d.readOnlyAt[i], dir)
		p.ro = true
		out = append(out, p)
	}
	return out
}
