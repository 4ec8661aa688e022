package agents

import (
	"fmt"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bcpgw/bcpgw/internal/netpolicy"
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
			d.fail(n, path, "must be none or a map of read_only, read_write and network, got %s", describe(n))
		}
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "must be none or a map of read_only, read_write and network, got %s", describe(n))
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
			d.fail(n, path, "must be none, host or a list of destinations, got %s", describe(n))
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
		d.fail(n, path, "must be none, host or a list of destinations, got %s", describe(n))
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
	if rel := relation(a.dir, b.dir); rel != "" {
		return rel, a.dir, b.dir
	}
	show := func(p place, resolved bool) string {
		if resolved && p.real != p.dir {
			return fmt.Sprintf("%s (through symlinks %s)", p.dir, p.real)
		}
		return p.dir
	}
	for _, f := range []struct{ ar, br bool }{{true, true}, {false, true}, {true, false}} {
		x, y := a.dir, b.dir
		if f.ar {
			x = a.real
		}
		if f.br {
			y = b.real
		}
		if rel := relation(x, y); rel != "" {
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
// own files and from each other (PROTOCOL.md section 2):
//   - a workdir or read_write path may not contain or lie inside the
//     agents directory (a runtime could rewrite definitions, its own
//     limits included) nor the state directory (the store, the control
//     socket and the other agents' default workdirs);
//   - a read_only path may not contain the agents directory, nor contain or
//     lie inside the state directory: both must stay invisible inside a
//     sandbox (section 8), and the store keeps every payload, rejected
//     ones included, which a Controller must never read;
//   - a Reader's writable paths (workdir, read_write) may not overlap any
//     Controller's paths (workdir, read_only, read_write): a file the
//     Reader writes and the Controller reads would be a channel around
//     the gateway.
//
// stateDir is empty when the state directory is not known (bcpgw
// validate without --state).
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
	var errs []*ParseError
	for _, d := range s.Agents {
		for _, p := range writable(d) {
			for _, g := range dirs {
				if rel, a, b := overlap(p, g.place); rel != "" {
					errs = append(errs, d.errorf(p.at, "%s %s the %s %s: %s; choose a directory outside it%s",
						a, rel, g.name, b, g.why, leaveOut(p)))
				}
			}
		}
		for _, p := range readOnly(d) {
			for _, g := range dirs {
				rel, a, b := overlap(p, g.place)
				if rel == "" || (g.name == "agents directory" && rel == "is inside") {
					continue // a subdirectory of the agents directory holds no definitions
				}
				errs = append(errs, d.errorf(p.at, "%s %s the %s %s: it must not be visible inside a sandbox; name the directories the runtime needs", a, rel, g.name, b))
			}
		}
	}
	for _, r := range s.Agents {
		if !r.holds(RoleReader) {
			continue
		}
		for _, c := range s.Agents {
			if c == r || !c.holds(RoleController) {
				continue
			}
			cPlaces := append(writable(c), readOnly(c)...)
			for _, w := range writable(r) {
				for _, cp := range cPlaces {
					if rel, a, b := overlap(w, cp); rel != "" {
						errs = append(errs, r.errorf(w.at, "reader %s may write %s, which %s %s (%s of controller %s, %s:%d): what a Reader writes must reach a Controller only through the gateway",
							r.Name, a, rel, b, cp.at, c.Name, c.File, c.lines.line(cp.at)))
					}
				}
			}
		}
	}
	return errs
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
		out = append(out, newPlace(d, d.readOnlyAt[i], dir))
	}
	return out
}
