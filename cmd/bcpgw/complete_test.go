package main

// Shell completion through the binary (bcpgw __complete, what the
// scripts of bcpgw completion call): agent names, pending approval items
// and parked deliveries from the running gateway; nothing, quietly and
// at once, without one.

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/store"
)

// completions runs bcpgw __complete with args (the last one is the word
// being completed) and returns the values offered, without their
// descriptions, and the descriptions by value. It fails unless the
// directive is 4 (no file names).
func completions(t *testing.T, env []string, args ...string) ([]string, map[string]string) {
	t.Helper()
	r := run(t, runOpts{env: env}, append([]string{"__complete"}, args...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) == 0 || lines[len(lines)-1] != ":4" {
		t.Fatalf("__complete %q: want exit 0 and the directive :4 last\n%s", args, r)
	}
	var values []string
	desc := map[string]string{}
	for _, l := range lines[:len(lines)-1] {
		v, d, _ := strings.Cut(l, "\t")
		values = append(values, v)
		desc[v] = d
	}
	return values, desc
}

func TestCLICompletion(t *testing.T) {
	t.Parallel()
	// Without a gateway: nothing, at once, and nothing created.
	empty := opStateDir(t)
	// A socket that accepts and never answers: nothing either, within
	// the completion's timeout.
	hung := opStateDir(t)
	ln, err := net.Listen("unix", filepath.Join(hung, "control.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cmds := [][]string{{"agents", "start"}, {"agents", "stop"}, {"prompt"}, {"approve"}, {"reject"}, {"deliveries", "retry"}, {"deliveries", "discard"}}
	for _, state := range []string{empty, hung} {
		for _, cmd := range cmds {
			start := time.Now()
			args := append(slices.Clone(cmd), "--state", state, "")
			if got, _ := completions(t, opEnv, args...); len(got) != 0 {
				t.Errorf("%q without a gateway offers %q", args, got)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%q took %s without a gateway", args, d)
			}
		}
	}
	if got, _ := completions(t, []string{"BCPGW_STATE="}, "approve", ""); len(got) != 0 {
		t.Errorf("approve without a state directory offers %q", got)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("completion created files in the state directory: %v", entries)
	}

	// A parked delivery, from an earlier run; then pending items.
	g := newOpEnv(t)
	if err := os.MkdirAll(g.state, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(g.state, "bcpgw.db"))
	if err != nil {
		t.Fatal(err)
	}
	parked := store.Delivery{Controller: "main", Reader: "researcher", SubscriptionID: "findings", Category: 2,
		Response: json.RawMessage(`{"finding":"poison"}`), Bits: 30, CreatedAt: time.Now()}
	if err := st.AddDelivery(context.Background(), &parked); err != nil {
		t.Fatal(err)
	}
	st.FinishDelivery(parked.ID, store.DeliveryParked, "kept failing", time.Now())
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	g.start(opPublishes(false, 2, "cp"))
	a := g.nextPending(map[string]bool{})

	env := []string{"BCPGW_STATE=" + g.state} // as a shell has it
	for _, cmd := range [][]string{{"agents", "start"}, {"agents", "stop"}, {"prompt"}} {
		got, desc := completions(t, env, append(cmd, "")...)
		if !slices.Equal(got, []string{"main", "researcher"}) || !strings.Contains(desc["main"], "controller") || !strings.Contains(desc["researcher"], "reader, running") {
			t.Errorf("%q: %q %q, want main and researcher described", cmd, got, desc)
		}
	}
	if got, _ := completions(t, env, "agents", "stop", "res"); !slices.Equal(got, []string{"researcher"}) {
		t.Errorf("agents stop res: %q", got)
	}
	if got, _ := completions(t, env, "prompt", "main", ""); len(got) != 0 {
		t.Errorf("prompt main (the text): %q", got)
	}
	for _, cmd := range []string{"approve", "reject"} {
		got, desc := completions(t, env, cmd, "")
		if !slices.Equal(got, []string{a.ID}) || !strings.HasPrefix(desc[a.ID], "Cat-3 researcher → main") {
			t.Errorf("%s: %q %q, want %s described", cmd, got, desc, a.ID)
		}
		if got, _ := completions(t, env, cmd, "zz"); len(got) != 0 {
			t.Errorf("%s zz: %q", cmd, got)
		}
		if got, _ := completions(t, env, cmd, a.ID, ""); len(got) != 0 {
			t.Errorf("%s %s (a second argument): %q", cmd, a.ID, got)
		}
	}
	for _, cmd := range []string{"retry", "discard"} {
		got, desc := completions(t, env, "deliveries", cmd, "--state", g.state, "dl-")
		if !slices.Equal(got, []string{parked.ID}) || !strings.Contains(desc[parked.ID], "researcher → main") {
			t.Errorf("deliveries %s: %q %q, want %s", cmd, got, desc, parked.ID)
		}
	}
	// The completion script is cobra's own.
	if r := run(t, runOpts{env: opEnv}, "completion", "bash"); r.code != 0 || !strings.Contains(r.stdout, "__complete") {
		t.Errorf("completion bash:\n%s", r)
	}
}
