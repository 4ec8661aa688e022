package agents

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bcpgw/bcpgw/bcp"
)

// A subscription's delivery policy: what the gateway does with pushes
// that validate, beyond charging and delivering them. A Controller sets it
// per subscription:
//
//	rate_limit: {max: 1, window: 1h}   # at most 1 accepted push in any hour
//	filter: priority in ["high", "critical"] && score >= 4
//	debounce: {key: topic, window: 10m}   # a newer push on the same topic replaces one not yet delivered
//	batch: {window: 5m, max: 20}          # pushes reach the Controller as one delivery of up to 20
//
// Both may be set together: debounce then also applies within the open
// batch. Neither applies to Cat-3, whose pushes an operator reads one by
// one anyway.

// Debounce asks that, within Window, a newer push with the same value of
// Key replace the one not yet delivered (the gateway's debounce: pending,
// and not yet handed to the Controller's runtime, or held in an open
// batch). Window runs from the acceptance of the push replaced.
type Debounce struct {
	Key    string // a Cat-1 field or Cat-2 question of the subscription
	Window time.Duration
}

// Batch asks that pushes accumulate for Window from the first, or until
// Max of them, and reach the Controller as one delivery: one turn.
type Batch struct {
	Window time.Duration
	Max    int
}

// MaxBatch bounds batch.max: a batch is one delivery, one prompt.
const MaxBatch = 1000

// policyDecoder decodes the policy keys of one subscription. The filter
// and the debounce key are checked once the whole subscription is read
// (finish): they refer to its fields, which may come later in the file.
type policyDecoder struct {
	d    *decoder
	s    *Subscription
	path string // the subscription's

	filter                  *yaml.Node
	debounceKey             *yaml.Node
	debounceSeen, batchSeen bool
}

func (d *decoder) policy(s *Subscription, path string) *policyDecoder {
	return &policyDecoder{d: d, s: s, path: path}
}

// rateLimit decodes rate_limit: {max: N, window: D}, N in 1..MaxRateLimit,
// D at least a second.
func (pd *policyDecoder) rateLimit(n *yaml.Node, p string) {
	d := pd.d
	r := Rate{}
	ok := d.mapping(n, p, fields{
		"max": func(n *yaml.Node, p string) {
			if v, good := d.between(n, p, 1, MaxRateLimit); good {
				r.Limit = v
			}
		},
		"window": func(n *yaml.Node, p string) { r.Window, _ = pd.window(n, p, time.Second) },
	})
	if !ok {
		return
	}
	if !pd.required(n, p, "max", "the number of pushes allowed in each window, e.g. 1") ||
		!pd.required(n, p, "window", "a duration such as 1h") || r.Limit == 0 || r.Window == 0 {
		return
	}
	pd.s.RateLimit = &r
}

// required reports whether key is set in the map at path p, failing if
// not.
func (pd *policyDecoder) required(n *yaml.Node, p, key, what string) bool {
	if pd.d.has(join(p, key)) {
		return true
	}
	pd.d.fail(n, join(p, key), "required: %s", what)
	return false
}

// window decodes a Go duration of at least min.
func (pd *policyDecoder) window(n *yaml.Node, p string, min time.Duration) (time.Duration, bool) {
	s, ok := pd.d.str(n, p)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil:
		pd.d.fail(n, p, "%q is not a duration (examples: 30s, 10m, 1h)", s)
	case v < min:
		pd.d.fail(n, p, "must be at least %s, got %q", min, s)
	default:
		return v, true
	}
	return 0, false
}

// filterKey keeps filter's node for finish.
func (pd *policyDecoder) filterKey(n *yaml.Node, p string) {
	if _, ok := pd.d.nonEmpty(n, p); ok {
		pd.filter = n
	}
}

// debounce decodes debounce: {key: NAME, window: D}.
func (pd *policyDecoder) debounce(n *yaml.Node, p string) {
	d := pd.d
	pd.debounceSeen = true
	var db Debounce
	if d.mapping(n, p, fields{
		"key": func(n *yaml.Node, p string) {
			if v, ok := d.nonEmpty(n, p); ok {
				db.Key, pd.debounceKey = v, n
			}
		},
		"window": func(n *yaml.Node, p string) { db.Window, _ = pd.window(n, p, time.Millisecond) },
	}) {
		pd.required(n, p, "key", "the Cat-1 field or Cat-2 question whose value names the entity")
		pd.required(n, p, "window", "a duration such as 10m")
	}
	pd.s.Debounce = &db
}

// batch decodes batch: {window: D, max: N}, N in 2..MaxBatch.
func (pd *policyDecoder) batch(n *yaml.Node, p string) {
	d := pd.d
	pd.batchSeen = true
	var b Batch
	if d.mapping(n, p, fields{
		"window": func(n *yaml.Node, p string) { b.Window, _ = pd.window(n, p, time.Millisecond) },
		"max": func(n *yaml.Node, p string) {
			if v, ok := d.between(n, p, 2, MaxBatch); ok {
				b.Max = v
			}
		},
	}) {
		pd.required(n, p, "window", "how long pushes accumulate, e.g. 5m")
		pd.required(n, p, "max", "the most pushes in one delivery, at least 2")
	}
	pd.s.Batch = &b
}

// finish checks what refers to the subscription's fields, once spec is
// complete: the filter is compiled against it, the debounce key looked
// up. A spec with problems of its own (already reported) is not used.
func (pd *policyDecoder) finish(spec bcp.Spec) {
	if pd.filter == nil && !pd.debounceSeen && !pd.batchSeen {
		return
	}
	d := pd.d
	if spec.Category == bcp.Cat3 {
		for _, k := range []struct {
			seen bool
			key  string
		}{{pd.filter != nil, "filter"}, {pd.debounceSeen, "debounce"}, {pd.batchSeen, "batch"}} {
			if k.seen && k.key == "batch" {
				p := join(pd.path, k.key)
				d.errorf(d.lines.line(p), p, "not allowed in category 3: every Cat-3 push waits for an operator and is delivered on its own once approved")
			} else if k.seen {
				p := join(pd.path, k.key)
				d.errorf(d.lines.line(p), p, "not allowed in category 3: a Cat-3 push is one free-text summary, which an operator reads anyway; there is no typed value to use")
			}
		}
		return
	}
	if len(spec.Problems()) > 0 {
		return
	}
	if n := pd.debounceKey; n != nil && !specHas(spec, n.Value) {
		p := join(pd.path, "debounce.key")
		d.fail(n, p, "%q is not a field or question of this subscription", n.Value)
	}
	if pd.filter != nil {
		pd.compileFilter(spec)
	}
}

func specHas(spec bcp.Spec, name string) bool {
	for _, f := range spec.Fields {
		if f.Name == name {
			return true
		}
	}
	for _, q := range spec.Questions {
		if q.ID == name {
			return true
		}
	}
	return false
}

// compileFilter compiles the filter, reporting each problem at its line:
// the filter's own line for a one-line filter, the line within a literal
// block (filter: |), else the filter key's.
func (pd *policyDecoder) compileFilter(spec bcp.Spec) {
	d, n := pd.d, pd.filter
	p := join(pd.path, "filter")
	f, err := CompileFilter(spec, n.Value)
	var fe *FilterError
	switch {
	case err == nil:
		pd.s.Filter = f
		return
	case !errors.As(err, &fe):
		d.errorf(d.lines.line(p), p, "%v", err)
		return
	}
	for _, pr := range fe.Problems {
		line := d.lines.line(p)
		switch {
		case n.Style&yaml.LiteralStyle != 0 && pr.Line > 0:
			line = n.Line + d.offset + pr.Line
		case pr.Line == 1 && n.Style&yaml.FoldedStyle == 0:
			line = n.Line + d.offset
		}
		d.errorf(line, p, "%s", pr)
	}
}

// PolicyText writes the delivery policy of s in one line, for summaries:
// e.g. "rate limit 1/hour; filter: score >= 4"; empty when it has none.
func (s *Subscription) PolicyText() string {
	out := ""
	add := func(format string, args ...any) {
		if out != "" {
			out += "; "
		}
		out += fmt.Sprintf(format, args...)
	}
	if s.RateLimit != nil {
		add("rate limit %s", s.RateLimit)
	}
	if s.Filter != nil {
		add("filter: %s", strings.Join(strings.Fields(s.Filter.Source), " "))
	}
	if s.Debounce != nil {
		add("debounce by %s within %s", s.Debounce.Key, s.Debounce.Window)
	}
	if s.Batch != nil {
		add("batch of up to %d within %s", s.Batch.Max, s.Batch.Window)
	}
	return out
}
