package agents

import "gopkg.in/yaml.v3"

// FloodLimit is how many lines an agent's runtime may write, set by the
// flood_limit key:
//
//	flood_limit: {lines_per_second: 500, burst: 2000}
//
// Lines the gateway asked for (the result of a turn it sent, a Reader's
// first answer to the query it was given) never count. A runtime over the
// limit is slowed, and stopped only if it keeps flooding without doing
// anything it was asked to; stderr lines over it are dropped. A zero field
// leaves the gateway's default in force (200 lines a second, bursts of
// 1,000).
type FloodLimit struct {
	LinesPerSecond int
	Burst          int
}

// floodLimit decodes flood_limit into def (both formats: TriOnyx has no
// such key, and its runtimes are limited like any other).
func (d *decoder) floodLimit(n *yaml.Node, p string, def *Definition) {
	var fl FloodLimit
	ok := d.mapping(n, p, fields{
		"lines_per_second": func(n *yaml.Node, p string) { fl.LinesPerSecond, _ = d.atLeast(n, p, 1) },
		"burst":            func(n *yaml.Node, p string) { fl.Burst, _ = d.atLeast(n, p, 1) },
	})
	if ok && len(n.Content) == 0 {
		d.fail(n, p, "set lines_per_second, burst or both (without flood_limit the defaults apply: 200 lines a second, bursts of 1000)")
		return
	}
	def.FloodLimit = fl
}
