package agents_test

import (
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

// flood_limit sets lines_per_second, burst or both; a field left out
// stays 0, which leaves the gateway's default in force.
func TestFloodLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		want agents.FloodLimit
	}{
		{"", agents.FloodLimit{}},
		{"flood_limit: {lines_per_second: 500, burst: 2000}\n", agents.FloodLimit{LinesPerSecond: 500, Burst: 2000}},
		{"flood_limit:\n  lines_per_second: 1\n", agents.FloodLimit{LinesPerSecond: 1}},
		{"flood_limit: {burst: 50}\n", agents.FloodLimit{Burst: 50}},
	}
	for _, tt := range tests {
		set := mustLoad(t, writeSet(t, map[string]string{"solo.md": solo(tt.yaml)}))
		if got := set.Agent("solo").FloodLimit; got != tt.want {
			t.Errorf("%q: FloodLimit: got %+v, want %+v", tt.yaml, got, tt.want)
		}
	}
	bad := []struct{ yaml, want string }{
		{"flood_limit: {lines_per_second: 0}\n", `solo.md:4: flood_limit.lines_per_second: must be >= 1, got 0`},
		{"flood_limit: {burst: -3}\n", `solo.md:4: flood_limit.burst: must be >= 1, got -3`},
		{"flood_limit:\n  lines_per_second: \"200\"\n", `solo.md:5: flood_limit.lines_per_second: must be an integer, got a string`},
		{"flood_limit: {lines_per_second: 2.5}\n", `solo.md:4: flood_limit.lines_per_second: must be an integer, got a number`},
		{"flood_limit: {lines_per_second: 99999999999}\n", `solo.md:4: flood_limit.lines_per_second: 99999999999 is too large`},
		{"flood_limit:\n  lines_per_second: 10\n  lines_per_sec: 10\n", `solo.md:6: flood_limit.lines_per_sec: unknown field (known: burst, lines_per_second)`},
		{"flood_limit: 200\n", `solo.md:4: flood_limit: must be a map, got an integer`},
		{"flood_limit: {}\n", `solo.md:4: flood_limit: set lines_per_second, burst or both`},
	}
	for _, tt := range bad {
		le := loadErrors(t, writeSet(t, map[string]string{"solo.md": solo(tt.yaml)}))
		if len(le.Errors) != 1 || !strings.Contains(le.Errors[0].Error(), tt.want) {
			t.Errorf("%q: errors %v, want one containing %q", tt.yaml, le.Errors, tt.want)
		}
	}
}

// A TriOnyx definition takes flood_limit too: its runtime writes lines
// like any other.
func TestFloodLimitTriOnyx(t *testing.T) {
	_, defs := writeTriOnyx(t, map[string]string{
		"agent-definitions/chatty.md": `---
name: chatty
tools: Read
flood_limit: {lines_per_second: 400}
---
`,
	})
	set := loadTriOnyx(t, defs, trionyxOpts())
	if got, want := set.Agent("chatty").FloodLimit, (agents.FloodLimit{LinesPerSecond: 400}); got != want {
		t.Errorf("FloodLimit = %+v, want %+v", got, want)
	}
}

// Changing the limit changes the definition (a reload restarts the
// agent's session with it); rewriting it in another layout does not.
func TestFloodLimitEqual(t *testing.T) {
	t.Parallel()
	load := func(yaml string) *agents.Definition {
		return mustLoad(t, writeSet(t, map[string]string{"solo.md": solo(yaml)})).Agent("solo")
	}
	a := load("flood_limit: {lines_per_second: 500, burst: 2000}\n")
	b := load("flood_limit:\n  burst: 2000\n  lines_per_second: 500\n")
	c := load("flood_limit: {lines_per_second: 501, burst: 2000}\n")
	if !a.Equal(b) {
		t.Error("the same flood_limit in another layout is a different definition")
	}
	if a.Equal(c) || a.Equal(load("")) {
		t.Error("a changed or removed flood_limit is the same definition")
	}
}
