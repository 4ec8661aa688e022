package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// debounceSet is main (controller, taking ${DELAY} for each delivery)
// with a subscription debounced by topic and one batched for 3 seconds,
// and researcher publishing ${PUB} as soon as it starts.
func debounceSet(t *testing.T, dir string) string {
	t.Helper()
	return writeSet(t, map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q]
workdir: %q
turn_timeout: 24h
env: {TESTRT_LOG: %q, TESTRT_DELAY: "${DELAY}"}
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 1
    budget_bits: 10000
    subscriptions:
      - id: keyed
        category: 1
        debounce: {key: topic, window: 1h}
        fields: [{name: topic, type: enum, values: [a, b]}, {name: score, type: integer, min: 1, max: 4}]
      - id: batched
        category: 1
        batch: {window: 3s, max: 10}
        fields: [{name: n, type: integer, min: 0, max: 3}]
---
`, testrt, agentDir(t, dir, "main"), filepath.Join(dir, "main", "main.log")),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q]
workdir: %q
autostart: true
tools: [BCPPublish]
env: {TESTRT_LOG: %q, TESTRT_PUBLISH: "${PUB}"}
bcp_channels:
  - {peer: main, role: reader, max_category: 1, budget_bits: 10000}
---
`, testrt, agentDir(t, dir, "researcher"), filepath.Join(dir, "researcher", "researcher.log")),
	})
}

// TestKillGatewayKeepsDebounceAndBatch: main is busy with the first push
// (topic a) when b:1 arrives and then b:2, which replaces it; two pushes
// wait in a batch. The gateway is killed with SIGKILL and restarted: main
// gets a, b:2 and the batch of both, never b:1, each once.
func TestKillGatewayKeepsDebounceAndBatch(t *testing.T) {
	dir := t.TempDir()
	agentsDir := debounceSet(t, dir)
	state := filepath.Join(dir, "state")
	pub := `[{"subscription_id": "keyed", "controller": "main", "response": {"topic": "a", "score": 1}},
		{"subscription_id": "keyed", "controller": "main", "response": {"topic": "b", "score": 1}},
		{"subscription_id": "keyed", "controller": "main", "response": {"topic": "b", "score": 2}},
		{"subscription_id": "batched", "controller": "main", "response": {"n": 0}},
		{"subscription_id": "batched", "controller": "main", "response": {"n": 1}}]`
	var log1 testproc.Buffer
	gw := startGateway(t, agentsDir, state, pub, &log1, "DELAY=1h")
	researcherLog := filepath.Join(dir, "researcher", "researcher.log")
	verdicts := waitTestrtRecords(t, researcherLog, "verdict", 5, &log1)
	for i, v := range verdicts {
		if !v.Success {
			t.Fatalf("verdict %d refused\n%s", i, log1.String())
		}
	}
	// main holds a (it takes an hour): b:1 was pending when b:2 came.
	waitTestrtRecords(t, filepath.Join(dir, "main", "main.log"), "delivery", 1, &log1)
	pids := map[int]bool{}
	for _, p := range childPids(gw.Process.Pid) {
		pids[p] = true
	}
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	waitGone(t, pids)

	var log2 testproc.Buffer
	gw2 := startGateway(t, agentsDir, state, `[]`, &log2, "DELAY=0s")
	defer func() {
		gw2.Process.Signal(syscall.SIGTERM)
		gw2.Wait()
	}()
	mainLog := filepath.Join(dir, "main", "main.log")
	waitTestrtRecords(t, mainLog, "applied", 3, &log2)
	time.Sleep(500 * time.Millisecond) // anything more would be wrong
	applied := waitTestrtRecords(t, mainLog, "applied", 3, &log2)
	got := map[string]int{}
	for _, r := range applied {
		got[string(r.Response)]++
	}
	want := map[string]int{`{"topic":"a","score":1}`: 1, `{"topic":"b","score":2}`: 1, `[{"n":0},{"n":1}]`: 1}
	if len(got) != len(want) {
		t.Errorf("main applied %v, want %v\nfirst run:\n%s\nsecond run:\n%s", got, want, log1.String(), log2.String())
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("main applied %s %d times, want %d (applied: %v)", k, got[k], n, got)
		}
	}
	for _, r := range readTestrtLog(t, mainLog) {
		var v map[string]any
		if r.Event == "delivery" && json.Unmarshal(r.Response, &v) == nil && v["topic"] == "b" && v["score"] == float64(1) {
			t.Errorf("the superseded push b:1 was delivered: %s", r.DeliveryID)
		}
	}
}
