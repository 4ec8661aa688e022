package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/notify"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// The gateway runs the notifier of its notify file and reads the file
// again on every reload: a target added is in force at once, and a file
// that no longer loads leaves the targets as they were, with a
// reload_failed event (notify_invalid).
func TestNotifyReloadsWithTheDefinitions(t *testing.T) {
	var mu sync.Mutex
	var kinds []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &m)
		mu.Lock()
		kinds = append(kinds, r.URL.Path+" "+m.Kind)
		mu.Unlock()
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "notify.yaml")
	write := func(body string) {
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("targets:\n  - {name: one, url: '" + srv.URL + "/one', events: ['reload_*']}\n")
	targets, err := notify.Load(file, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	e := startE2E(t, pair(1000, 1000, "review", nil, nil), func(c *Config) { c.Notify = targets })
	// Each loop opens its cursor after the newest event: what happens
	// after that is sent.
	started := func(name string) {
		testproc.Eventually(t, "the loop of "+name+" to start", func() bool {
			_, found, _ := e.gw.cfg.Store.NotifyCursor(testCtx(t), name)
			return found
		})
	}
	started("one")
	write("targets:\n  - {name: one, url: '" + srv.URL + "/one', events: ['reload_*']}\n  - {name: two, url: '" + srv.URL + "/two', events: [reload_ok]}\n")
	r, err := e.gw.Reload(testCtx(t), "test")
	if err != nil || r.Notify != "notify targets added two" || !strings.Contains(strings.Join(r.Summary(), "\n"), "notify targets added two") {
		t.Fatalf("Reload = %+v, %v", r, err)
	}
	started("two")
	write("targets:\n  - {name: one, url: 'http://example.com/', events: ['reload_*']}\n")
	r, err = e.gw.Reload(testCtx(t), "test")
	if err != nil || !strings.Contains(r.Notify, "not reloaded") {
		t.Fatalf("Reload with a bad notify file = %+v, %v", r, err)
	}
	if ev := e.waitEvent("reload_failed", "notify_invalid"); len(ev) != 1 || !strings.Contains(ev[0].Detail, file+":2: targets[0].url") {
		t.Errorf("reload_failed events = %+v", ev)
	}
	if names := e.gw.notifier.Targets().Names(); strings.Join(names, ",") != "one,two" {
		t.Errorf("targets after a refused file: %v, want one,two", names)
	}
	// one hears both reloads and the refusal; two, in force since the
	// first reload, hears at least the second.
	var got string
	if !testproc.CheckFor(testWait, pollStep, func() bool {
		mu.Lock()
		got = strings.Join(kinds, ",")
		mu.Unlock()
		return strings.Count(got, "/one reload_ok") == 2 && strings.Count(got, "/one reload_failed") == 1 && strings.Contains(got, "/two reload_ok")
	}) {
		t.Fatalf("notifications %s; want two reload_ok and a reload_failed to one, a reload_ok to two", got)
	}
}
