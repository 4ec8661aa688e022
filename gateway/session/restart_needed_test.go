package session

import (
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/agents"
)

// Every setting a session is started with needs a restart when it
// changes; the others apply to the running session.
func TestRestartNeeded(t *testing.T) {
	base := func() *agents.Definition {
		return &agents.Definition{Name: "main", Runtime: []string{"rt"}, IdleTimeout: time.Minute, TurnTimeout: time.Hour}
	}
	for name, change := range map[string]func(*agents.Definition){
		"runtime":      func(d *agents.Definition) { d.Runtime = []string{"rt", "-v"} },
		"turn_timeout": func(d *agents.Definition) { d.TurnTimeout = 2 * time.Hour },
		"flood_limit":  func(d *agents.Definition) { d.FloodLimit = agents.FloodLimit{LinesPerSecond: 5} },
		"dialect":      func(d *agents.Definition) { d.Dialect = agents.DialectTriOnyx },
		"sandbox":      func(d *agents.Definition) { d.Sandbox.ReadOnly = []string{"/data"} },
	} {
		d := base()
		change(d)
		if !restartNeeded(base(), d) {
			t.Errorf("changing %s does not restart the agent", name)
		}
	}
	if d := base(); restartNeeded(base(), d) {
		t.Error("an unchanged definition restarts the agent")
	}
	d := base()
	d.Description = "channels and descriptions apply at once"
	if restartNeeded(base(), d) {
		t.Error("a changed description restarts the agent")
	}
}
