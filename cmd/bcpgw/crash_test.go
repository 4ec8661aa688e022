package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/internal/testproc"
)

// testrtRecord is the part of a testrt log line this test reads.
type testrtRecord struct {
	Event       string          `json:"event"`
	Pid         int             `json:"pid"`
	Index       int             `json:"index"`
	Success     bool            `json:"success"`
	DeliveryID  string          `json:"delivery_id"`
	Redelivered bool            `json:"redelivered"`
	Response    json.RawMessage `json:"response"`
}

func readTestrtLog(t *testing.T, path string) []testrtRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []testrtRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r testrtRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // a line cut short by the kill
		}
		out = append(out, r)
	}
	return out
}

// crashSet is a reader that publishes what ${PUB} says as soon as it
// starts, and a controller that records what it applies, taking 5ms for
// each, so that deliveries are still waiting when the gateway is killed;
// both are testrt.
func crashSet(t *testing.T, dir string) string {
	t.Helper()
	return hangSet(t, dir, "5ms", 0)
}

// startGateway starts bcpgw run on agentsDir and state, its Readers
// publishing pub (TESTRT_PUBLISH: "${PUB}" in their definitions), with
// env (KEY=value) added to its environment.
func startGateway(t *testing.T, agentsDir, state, pub string, stderr *testproc.Buffer, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "run", "--agents", agentsDir, "--state", state, "--log-level", "debug")
	cmd.Env = append(append(baseEnv(), "PUB="+pub, "BCPGW_STATE="), env...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// gatewayCLI starts a gateway as startGateway does, publishing nothing,
// stops it (SIGTERM) when the test ends, and returns cli: a client
// command against its state directory that must exit with want, or the
// test fails with the gateway's log.
func gatewayCLI(t *testing.T, agentsDir, state string, log *testproc.Buffer) func(want int, args ...string) result {
	t.Helper()
	gw := startGateway(t, agentsDir, state, `[]`, log)
	t.Cleanup(func() {
		gw.Process.Signal(syscall.SIGTERM)
		gw.Wait()
	})
	return func(want int, args ...string) result {
		t.Helper()
		r := run(t, runOpts{env: opEnv}, append(args, "--state", state)...)
		if r.code != want {
			t.Fatalf("bcpgw %q: exit %d, want %d\n%s\ngateway log:\n%s", args, r.code, want, r, log)
		}
		return r
	}
}

// childPids lists the children of pid, from every thread's children file.
func childPids(pid int) []int {
	var out []int
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// waitGone waits until none of the pids is alive.
func waitGone(t *testing.T, pids map[int]bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for pid := range pids {
		for syscall.Kill(pid, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("runtime %d still alive after the gateway died", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// Accepted means durable: SIGKILL the gateway during a stream of
// publishes, restart it on the same state directory, and every publish
// the Reader heard accepted reaches the Controller at least once, under
// one delivery_id, and is applied exactly once.
func TestKillGatewayDuringPublishesLosesNothing(t *testing.T) {
	dir := t.TempDir()
	agentsDir := crashSet(t, dir)
	state := filepath.Join(dir, "state")
	var log1 testproc.Buffer
	gw := startGateway(t, agentsDir, state, `[{"subscription_id": "items", "controller": "main", "response": {"item": "item {i}"}, "repeat": 100000}]`, &log1)
	researcherLog := filepath.Join(dir, "researcher", "researcher.log")
	deadline := time.Now().Add(30 * time.Second)
	for {
		accepted := 0
		for _, r := range readTestrtLog(t, researcherLog) {
			if r.Event == "verdict" && r.Success {
				accepted++
			}
		}
		if accepted >= 200 {
			break
		}
		if time.Now().After(deadline) {
			gw.Process.Kill()
			t.Fatalf("only %d publishes accepted before the deadline\n%s", accepted, log1.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The sessions' processes (each sandbox's init), which die with the
	// gateway and take their runtimes with them.
	pids := map[int]bool{}
	for _, p := range childPids(gw.Process.Pid) {
		pids[p] = true
	}
	if len(pids) != 2 {
		t.Errorf("the gateway has %d child processes, want its 2 sessions", len(pids))
	}
	if err := gw.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gw.Wait()
	// Wait for them so that the logs are final.
	waitGone(t, pids)

	want := map[string]bool{} // the items the researcher heard accepted
	for _, r := range readTestrtLog(t, researcherLog) {
		if r.Event == "verdict" && r.Success {
			want[fmt.Sprintf(`{"item":"item %d"}`, r.Index)] = true
		}
	}
	firstRun := readTestrtLog(t, filepath.Join(dir, "main", "main.log"))

	// Restart on the same state, with a reader that publishes nothing.
	var log2 testproc.Buffer
	gw2 := startGateway(t, agentsDir, state, `[]`, &log2)
	defer func() {
		gw2.Process.Signal(syscall.SIGTERM)
		gw2.Wait()
	}()
	var main []testrtRecord
	deadline = time.Now().Add(60 * time.Second)
	for {
		main = readTestrtLog(t, filepath.Join(dir, "main", "main.log"))
		applied := map[string]bool{}
		for _, r := range main {
			if r.Event == "applied" {
				applied[string(r.Response)] = true
			}
		}
		missing := 0
		for item := range want {
			if !applied[item] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d accepted publishes never applied\nfirst run:\n%s\nsecond run:\n%s", missing, len(want), log1.String(), log2.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	ids := map[string]string{}  // item -> its delivery_id
	applied := map[string]int{} // delivery_id -> times applied
	afterRestart := 0
	for _, r := range main {
		switch r.Event {
		case "delivery":
			item := string(r.Response)
			if id, ok := ids[item]; ok && id != r.DeliveryID {
				t.Errorf("%s delivered under two ids: %s and %s", item, id, r.DeliveryID)
			}
			ids[item] = r.DeliveryID
		case "applied":
			applied[r.DeliveryID]++
		}
	}
	for id, n := range applied {
		if n != 1 {
			t.Errorf("delivery %s applied %d times", id, n)
		}
	}
	for _, r := range main[len(firstRun):] {
		if r.Event == "delivery" {
			afterRestart++
		}
	}
	t.Logf("%d publishes accepted before the kill; %d delivered after the restart", len(want), afterRestart)
	// The test means something only if the kill left deliveries behind.
	if afterRestart == 0 || !strings.Contains(log2.String(), "resuming deliveries from the state directory") {
		t.Errorf("nothing was left to deliver after the restart:\n%s", log2.String())
	}
}
