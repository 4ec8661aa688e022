package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// notifyKey is the signing key of the tests' targets; the gateway gets it
// as $NOTIFY_SECRET in Standard Webhooks' whsec_ form.
var notifyKey = []byte("bcpgw-notify-test-key-0123456789")

func notifySecretEnv() string {
	return "NOTIFY_SECRET=whsec_" + base64.StdEncoding.EncodeToString(notifyKey)
}

// hookServer is a webhook endpoint on loopback that verifies each
// request's signature on its own and counts the notifications by their
// idempotency key.
type hookServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	byID   map[string]int
	seqOf  map[string]int64
	bad    []string
	status int
	delay  time.Duration // before each answer
}

func newHookServer(t *testing.T) *hookServer {
	h := &hookServer{byID: map[string]int{}, seqOf: map[string]int64{}, status: 200}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		mac := hmac.New(sha256.New, notifyKey)
		mac.Write([]byte(id + "." + ts + "." + string(body)))
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		var m struct {
			ID  string `json:"id"`
			Seq int64  `json:"seq"`
		}
		_ = json.Unmarshal(body, &m)
		h.mu.Lock()
		defer h.mu.Unlock()
		if r.Header.Get("webhook-signature") != want || m.ID != id {
			h.bad = append(h.bad, fmt.Sprintf("id %q body id %q signature %q, want %q", id, m.ID, r.Header.Get("webhook-signature"), want))
		}
		h.byID[id]++
		h.seqOf[id] = m.Seq
		if h.delay > 0 {
			time.Sleep(h.delay) // a slow endpoint, so that events queue up
		}
		w.WriteHeader(h.status)
	}))
	t.Cleanup(func() {
		h.srv.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, b := range h.bad {
			t.Errorf("bad request: %s", b)
		}
	})
	return h
}

func (h *hookServer) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for id, n := range h.byID {
		out[id] = n
	}
	return out
}

func writeNotifyFile(t *testing.T, dir, url string, events string) string {
	t.Helper()
	path := filepath.Join(dir, "notify.yaml")
	body := fmt.Sprintf("targets:\n  - name: hook\n    url: %s\n    secret_env: NOTIFY_SECRET\n    events: [%s]\n", url, events)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startNotifyGateway(t *testing.T, agentsDir, state, pub, notifyFile string, stderr *testproc.Buffer) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "run", "--agents", agentsDir, "--state", state, "--notify", notifyFile, "--log-level", "debug")
	cmd.Env = append(baseEnv(), "PUB="+pub, "BCPGW_STATE=", notifySecretEnv())
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// notifyState reads, from the state file (read-only, as the gateway left
// it or while it runs), the seqs of the publish_accepted events and the
// cursor of target hook.
func notifyState(t *testing.T, state string) (accepted []int64, cursor int64, instance string) {
	t.Helper()
	st, err := store.OpenReadOnly(filepath.Join(state, "bcpgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for since := int64(0); ; {
		page, err := st.Events(ctx, since, 1000, "publish_accepted")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			accepted = append(accepted, e.Seq)
			since = e.Seq
		}
		if len(page) < 1000 {
			break
		}
	}
	c, _, err := st.NotifyCursor(ctx, "hook")
	if err != nil {
		t.Fatal(err)
	}
	if instance, err = st.NotifyInstance(ctx); err != nil {
		t.Fatal(err)
	}
	return accepted, c.Seq, instance
}

// A gateway killed with SIGKILL while it sends notifications, and started
// again on the same state directory, sends every event its target asks
// for at least once, and sends again only those after the cursor it had
// made durable: nothing lost, no flood.
func TestNotifyAcrossAKillLosesNothing(t *testing.T) {
	dir := t.TempDir()
	agentsDir := crashSet(t, dir)
	state := filepath.Join(dir, "state")
	hook := newHookServer(t)
	hook.delay = 3 * time.Millisecond
	file := writeNotifyFile(t, dir, hook.srv.URL, "publish_accepted")
	var log1 testproc.Buffer
	gw := startNotifyGateway(t, agentsDir, state, `[{"subscription_id": "items", "controller": "main", "response": {"item": "item {i}"}, "repeat": 400}]`, file, &log1)
	deadline := time.Now().Add(60 * time.Second)
	for len(hook.counts()) < 100 {
		if time.Now().After(deadline) {
			gw.Process.Kill()
			t.Fatalf("%d notifications before the deadline\n%s", len(hook.counts()), log1.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	killGateway(t, gw)
	before := hook.counts()
	accepted, cursor, instance := notifyState(t, state)
	if cursor == 0 || len(accepted) <= len(before) {
		t.Fatalf("after the kill: cursor %d, %d publish_accepted, %d notified: want events left to notify", cursor, len(accepted), len(before))
	}
	hook.mu.Lock()
	hook.delay = 0
	hook.mu.Unlock()
	var log2 testproc.Buffer
	gw2 := startNotifyGateway(t, agentsDir, state, `[]`, file, &log2)
	defer func() {
		_ = gw2.Process.Signal(syscall.SIGTERM)
		_ = gw2.Wait()
	}()
	key := func(seq int64) string { return fmt.Sprintf("bcpgw-%s-%d", instance, seq) }
	deadline = time.Now().Add(60 * time.Second)
	for {
		counts := hook.counts()
		missing := 0
		for _, seq := range accepted {
			if counts[key(seq)] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d publish_accepted events never notified\n%s", missing, len(accepted), log2.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The notify test command goes through the running gateway, which
	// signs with its own environment's secret.
	for run(t, runOpts{}, "status", "--state", state).code != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not answer\n%s", log2.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := run(t, runOpts{}, "notify", "test", "hook", "--state", state)
	if r.code != 0 || !strings.Contains(r.stdout, "hook (127.0.0.1:") || !strings.Contains(r.stdout, "signed): 200 OK") {
		t.Errorf("notify test through the gateway:\n%s", r)
	}
	_ = gw2.Process.Signal(syscall.SIGTERM)
	_ = gw2.Wait()
	after := hook.counts()
	resent, tests := 0, 0
	for id, n := range after {
		if strings.Contains(id, "-test-") {
			tests++
			continue
		}
		var seq int64
		if _, err := fmt.Sscanf(strings.TrimPrefix(id, "bcpgw-"+instance+"-"), "%d", &seq); err != nil {
			t.Errorf("idempotency key %q is not bcpgw-%s-SEQ", id, instance)
			continue
		}
		if n > 1 {
			resent++
			if seq <= cursor {
				t.Errorf("event %d sent %d times, though the cursor (%d) was past it when the gateway was killed", seq, n, cursor)
			}
		}
	}
	if tests != 1 {
		t.Errorf("%d test notifications, want 1", tests)
	}
	// The cursor made durable before the kill is close behind what was
	// sent: only the last moments' notifications are sent again.
	above := 0
	for id := range before {
		hook.mu.Lock()
		seq := hook.seqOf[id]
		hook.mu.Unlock()
		if seq > cursor {
			above++
		}
	}
	if above > len(before)/2 {
		t.Errorf("%d of the %d events notified before the kill were past the durable cursor %d: the cursor is not kept", above, len(before), cursor)
	}
	if len(after)-tests <= len(before) {
		t.Errorf("%d events notified in all, %d before the kill: the restart sent nothing new", len(after)-tests, len(before))
	}
	t.Logf("%d events notified before the kill (cursor at %d), %d sent again after it, %d in all", len(before), cursor, resent, len(after)-tests)
}

// bcpgw notify test --notify FILE sends from the command itself; the
// exit status says whether the endpoint took it. bcpgw run refuses a
// notify file that does not load, at its line, before starting anything.
func TestNotifyTestCommandAndBadFile(t *testing.T) {
	dir := t.TempDir()
	hook := newHookServer(t)
	file := writeNotifyFile(t, dir, hook.srv.URL, "approval_queued")
	r := run(t, runOpts{env: []string{notifySecretEnv()}}, "notify", "test", "hook", "--notify", file)
	if r.code != 0 || !strings.Contains(r.stdout, "200 OK") || len(hook.counts()) != 1 {
		t.Errorf("notify test:\n%s", r)
	}
	hook.mu.Lock()
	hook.status = http.StatusGone
	hook.mu.Unlock()
	r = run(t, runOpts{env: []string{notifySecretEnv()}}, "notify", "test", "hook", "--notify", file, "--json")
	var res struct {
		Status  int    `json:"status"`
		Outcome string `json:"outcome"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 1 || res.Status != 410 || res.Outcome != "gone" {
		t.Errorf("notify test against 410:\n%s", r)
	}
	// The secret's variable unset: refused at its line.
	r = run(t, runOpts{}, "notify", "test", "hook", "--notify", file)
	if r.code != exitUsage || !strings.Contains(r.stderr, file+":4: targets[0].secret_env: $NOTIFY_SECRET is not set") {
		t.Errorf("notify test without the secret:\n%s", r)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("targets:\n  - name: x\n    url: http://example.com/hook\n    events: [session_failed]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, runOpts{}, "run", "--agents", demoSet(t), "--state", filepath.Join(dir, "state"), "--notify", bad)
	for _, want := range []string{bad + ":3: targets[0].url: http is allowed only to a loopback address", bad + ":4: targets[0].events[0]: \"session_failed\" is not an event kind: did you mean agent_failed"} {
		if r.code != exitFailed || !strings.Contains(r.stderr, want) {
			t.Errorf("run with a bad notify file: want %q\n%s", want, r)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err == nil {
		t.Error("run created its state directory before refusing the notify file")
	}
}
