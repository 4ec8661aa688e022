package notify

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

var goodEnv = env(map[string]string{
	"SECRET": "whsec_" + "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "TOKEN": "tk_abc",
	"SLACK_URL": "https://hooks.slack.com/services/T0/B0/XYZ", "SHORT": "short",
})

func TestParseTargets(t *testing.T) {
	ts, err := Parse("notify.yaml", []byte(`# who hears what
targets:
  - name: phone
    url: https://ntfy.sh/bcpgw-demo
    format: ntfy
    token_env: TOKEN
    events: [approval_queued, agent_failed]
  - name: team
    url_env: SLACK_URL
    format: slack
    events: ["approval_*", budget_exhausted, reload_failed, egress_refused]
  - name: audit
    url: http://127.0.0.1:9000/hook
    secret_env: SECRET
    events: ["*"]
`), goodEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ts.Names(), ","); got != "phone,team,audit" {
		t.Fatalf("names %s", got)
	}
	phone, team, audit := ts.List[0], ts.List[1], ts.List[2]
	if phone.Format != FormatNtfy || phone.token != "tk_abc" || phone.Signed() || phone.Line != 3 {
		t.Errorf("phone = %+v", phone)
	}
	if team.URL != "https://hooks.slack.com/services/T0/B0/XYZ" || team.Host() != "hooks.slack.com" {
		t.Errorf("team url %q host %q", team.URL, team.Host())
	}
	if audit.Format != FormatJSON || !audit.Signed() || string(audit.secret) != "0123456789abcdef0123456789abcdef" {
		t.Errorf("audit = %+v (json by default, key decoded from whsec_)", audit)
	}
	for _, c := range []struct {
		t               *Target
		kind, code, ref string
		want            bool
	}{
		{phone, "approval_queued", "", "", true},
		{phone, "approval_approved", "", "", false},
		{team, "approval_expired", "approval_expired", "", true},
		{team, "refused", "budget_exhausted", "", true},
		{team, "refused", "validation_failed", "", false},
		{team, "egress_refused", "", "", true},
		{audit, "session_started", "", "", true},
		{audit, "notify_failed", "", "phone", false}, // "*" does not match the notifier's own
	} {
		if got := c.t.Matches(c.kind, c.code, c.ref); got != c.want {
			t.Errorf("%s.Matches(%s, %s) = %v, want %v", c.t.Name, c.kind, c.code, got, c.want)
		}
	}
	own := &Target{Name: "ops", Events: []string{"notify_*"}}
	if !own.Matches("notify_failed", "", "phone") || own.Matches("notify_failed", "", "ops") {
		t.Error("notify_* must match other targets' events and not the target's own")
	}
}

// Every problem of a notify file is reported, each at its line.
func TestParseTargetsErrors(t *testing.T) {
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"unknown and duplicate keys", `targets:
  - name: a
    url: https://example.com/h
    events: [agent_failed]
    evnets: [x]
    name: b
`, []string{"notify.yaml:5: targets[0].evnets: unknown key", "notify.yaml:6: targets[0].name: duplicate key (first set on line 2)"}},
		{"urls", `targets:
  - name: plain
    url: http://example.com/h
    events: [agent_failed]
  - name: none
    events: [agent_failed]
  - name: both
    url: https://a.example/h
    url_env: SLACK_URL
    events: [agent_failed]
  - name: relative
    url: /hook
    events: [agent_failed]
  - name: ftp
    url: ftp://example.com/
    events: [agent_failed]
`, []string{
			"notify.yaml:3: targets[0].url: http is allowed only to a loopback address",
			"notify.yaml:5: targets[1].url: required",
			"notify.yaml:9: targets[2].url_env: url is set too",
			"notify.yaml:12: targets[3].url: \"/hook\" is not an absolute URL",
			"notify.yaml:15: targets[4].url: scheme \"ftp\"",
		}},
		{"environment", `targets:
  - name: a
    url_env: UNSET_URL
    events: [agent_failed]
  - name: b
    url: https://example.com/h
    secret_env: UNSET
    events: [agent_failed]
  - name: c
    url: https://example.com/h
    secret_env: SHORT
    token_env: 'not a name'
    events: [agent_failed]
`, []string{
			"notify.yaml:3: targets[0].url_env: $UNSET_URL is not set",
			"notify.yaml:7: targets[1].secret_env: $UNSET is not set",
			"notify.yaml:11: targets[2].secret_env: $SHORT: the secret is 5 bytes",
			"notify.yaml:12: targets[2].token_env: \"not a name\" is not the name of an environment variable",
		}},
		{"events", `targets:
  - name: a
    url: https://example.com/h
    events: [session_failed, approval_*, "[", approval_queud, 3]
  - name: b
    url: https://example.com/h
  - name: c
    url: https://example.com/h
    events: []
    format: teams
`, []string{
			"notify.yaml:4: targets[0].events[0]: \"session_failed\" is not an event kind: did you mean agent_failed",
			"notify.yaml:4: targets[0].events[2]: \"[\" is not a valid pattern",
			"notify.yaml:4: targets[0].events[3]: \"approval_queud\" matches no event kind or refusal code",
			"notify.yaml:4: targets[0].events[4]: must be an event kind or pattern (a string), got an integer",
			"notify.yaml:5: targets[1].events: required",
			"notify.yaml:9: targets[2].events: must name at least one",
			"notify.yaml:10: targets[2].format: \"teams\" is not a format",
		}},
		{"names", `targets:
  - name: Phone
    url: https://example.com/h
    events: [agent_failed]
  - name: ok
    url: https://example.com/h
    events: [agent_failed]
  - name: ok
    url: https://example.com/h
    events: [agent_failed]
`, []string{"notify.yaml:2: targets[0].name: \"Phone\" must match", "notify.yaml:8: targets[2].name: \"ok\" is already the name of the target on line 5"}},
		{"shape", "targets: {name: a}\n", []string{"notify.yaml:1: targets: must be a list of targets, got a map"}},
		{"top level", "target: []\n", []string{"notify.yaml:1: target: unknown key (known: targets)"}},
		{"yaml", "targets:\n  - name: a\n   url: x\n", []string{"notify.yaml:1: invalid YAML: did not find expected '-' indicator"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("notify.yaml", []byte(c.file), goodEnv)
			var le *agents.LoadError
			if !errors.As(err, &le) {
				t.Fatalf("Parse = %v, want a LoadError", err)
			}
			if len(le.Errors) != len(c.want) {
				t.Errorf("%d errors, want %d:\n%v", len(le.Errors), len(c.want), err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("errors lack %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestParseEmptyFile(t *testing.T) {
	for _, f := range []string{"", "# nothing yet\n", "targets:\n", "targets: []\n"} {
		ts, err := Parse("n.yaml", []byte(f), goodEnv)
		if err != nil || len(ts.List) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no targets", f, ts, err)
		}
	}
}

func TestLoadReadsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.yaml")
	if err := os.WriteFile(path, []byte("targets:\n  - {name: a, url: 'https://x.example', events: [agent_failed], secret_env: NOPE}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, env(nil))
	if err == nil || !strings.Contains(err.Error(), path+":2: targets[0].secret_env: $NOPE is not set") {
		t.Errorf("Load = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file = %v", err)
	}
}

func TestCheckURL(t *testing.T) {
	for url, ok := range map[string]bool{
		"https://example.com/h":       true,
		"http://127.0.0.1:8080/h":     true,
		"http://127.1.2.3/h":          true,
		"http://[::1]:9/h":            true,
		"http://localhost:9/h":        true,
		"http://localhost.evil.com/h": false,
		"http://10.0.0.1/h":           false,
		"http://[::ffff:7f00:1]/h":    true, // IPv4-mapped 127.0.0.1
		"https://example.com/h#frag":  false,
		"mailto:a@example.com":        false,
		"example.com/h":               false,
	} {
		if err := CheckURL(url); (err == nil) != ok {
			t.Errorf("CheckURL(%s) = %v, want ok %v", url, err, ok)
		}
	}
}
