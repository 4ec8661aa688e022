package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The strictness bug of issue 14, through the real binary: a Controller's
// query whose question misspells a key ("fromat") was accepted with the
// format silently dropped. It is refused with validation_failed naming the
// key, the Reader never sees it, and a well-formed query still goes out.
func TestQuerySpecUnknownKeyIsRefused(t *testing.T) {
	base, state := t.TempDir(), filepath.Join(t.TempDir(), "state")
	logs := filepath.Join(base, "main", "main.log")
	queries := []map[string]any{
		{"request_id": "r-typo", "to": "researcher", "category": 2, "spec": map[string]any{
			"questions": []map[string]any{{"id": "who", "question": "Who wrote it?", "max_words": 3, "fromat": "person_name"}}}},
		{"request_id": "r-good", "to": "researcher", "category": 2, "spec": map[string]any{
			"questions": []map[string]any{{"id": "who", "question": "Who wrote it?", "max_words": 3, "expected_format": "person_name"}}}},
	}
	agents := writeSet(t, map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q]
workdir: %q
tools: [BCPQuery]
env: {TESTRT_LOG: %q, TESTRT_QUERIES: %s}
bcp_channels:
  - {peer: researcher, role: controller, max_category: 2, budget_bits: 100000, max_cat2_queries: 5}
---
`, testrt, agentDir(t, base, "main"), logs, jsonYAML(t, queries)),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q]
workdir: %q
tools: [BCPRespond]
env: {TESTRT_LOG: %q, TESTRT_SILENT: "1"}
bcp_channels:
  - {peer: main, role: reader, max_category: 2, budget_bits: 100000, max_cat2_queries: 5}
---
`, testrt, agentDir(t, base, "researcher"), filepath.Join(base, "researcher", "researcher.log")),
	})
	gw := exec.Command(bin, "run", "--agents", agents, "--state", state)
	gw.Env = baseEnv()
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		_ = gw.Wait()
	}()
	deadline := time.Now().Add(20 * time.Second)
	for run(t, runOpts{}, "status", "--state", state).code != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the gateway did not come up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := run(t, runOpts{}, "prompt", "main", "query", "--state", state); r.code != 0 {
		t.Fatalf("prompt:\n%s", r)
	}
	type rec struct {
		Event, RequestID, Detail string
	}
	var got []rec
	for time.Now().Before(deadline) {
		got = nil
		if b, err := os.ReadFile(logs); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				var r struct {
					Event     string `json:"event"`
					RequestID string `json:"request_id"`
					Detail    string `json:"detail"`
				}
				if json.Unmarshal([]byte(line), &r) == nil && strings.HasPrefix(r.Event, "query_") {
					got = append(got, rec{r.Event, r.RequestID, r.Detail})
				}
			}
		}
		if len(got) >= 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 2 {
		t.Fatalf("main's query outcomes = %+v, want two", got)
	}
	if got[0].Event != "query_error" || got[0].RequestID != "r-typo" || !strings.Contains(got[0].Detail, "validation_failed") ||
		!strings.Contains(got[0].Detail, "fromat") {
		t.Errorf("the misspelled query: %+v, want query_error validation_failed naming fromat", got[0])
	}
	if got[1].Event != "query_sent" || got[1].RequestID != "r-good" {
		t.Errorf("the well-formed query: %+v, want query_sent", got[1])
	}
	// The refusal is stored in the background: main may have logged its
	// query_error before.
	opWait(t, "the refusal to be audited", func() (bool, string) {
		ev := run(t, runOpts{}, "events", "--state", state, "--type", "refused")
		return strings.Contains(ev.stdout, "fromat"), ev.String()
	})
}
