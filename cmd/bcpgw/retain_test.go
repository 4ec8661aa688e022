package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/gateway/control"
)

// bcpgw run --retain prunes old events while the gateway runs: a cursor
// from before the oldest kept is answered from there with a notice on
// stderr, seqs go on, and the exposure report keeps its figures.
func TestCLIRetain(t *testing.T) {
	t.Parallel()
	g := newOpEnv(t)
	g.runArgs = []string{"--retain", "2s"} // pruned every 2s
	g.start(opPublishes(true, 0, "rt"))
	opWait(t, "the Cat-1 and Cat-2 deliveries acknowledged", func() (bool, string) {
		evs := g.events("--type", "delivery_acked")
		return len(evs) == 2, fmt.Sprintf("%+v", evs)
	})
	var report control.Report
	opJSON(t, g.ok("report", "--json").stdout, &report)
	if len(report.Sessions) != 1 || report.Sessions[0].Bits <= 0 {
		t.Fatalf("report before pruning: %+v", report)
	}
	before := g.events()

	// Pruning is recorded as an event of its own, after the round.
	var r result
	opWait(t, "the first events pruned, and a retention_pruned event", func() (bool, string) {
		r = g.ok("events", "--json")
		return strings.Contains(r.stderr, "were pruned") && strings.Contains(r.stdout, `"retention_pruned"`), r.String()
	})
	var oldest int64
	if _, err := fmt.Sscanf(r.stderr, "bcpgw events: events before %d were pruned", &oldest); err != nil || oldest <= before[0].Seq {
		t.Fatalf("events: stderr %q (%v), want the seq before which events were pruned, after %d", r.stderr, err, before[0].Seq)
	}
	evs := opParseEvents(t, r.stdout)
	if len(evs) > 0 && evs[0].Seq < oldest {
		t.Errorf("events printed from %d, before the oldest kept %d", evs[0].Seq, oldest)
	}
	// A cursor at the oldest kept needs no notice; seqs go on.
	if r := g.ok("events", "--since", strconv.FormatInt(oldest-1, 10)); r.stderr != "" {
		t.Errorf("events --since %d: stderr %q, want none", oldest-1, r.stderr)
	}
	if last := g.status().LastEventSeq; last < before[len(before)-1].Seq {
		t.Errorf("last seq %d after pruning, was %d", last, before[len(before)-1].Seq)
	}
	// The report has not lost a bit.
	var after control.Report
	opJSON(t, g.ok("report", "--json").stdout, &after)
	if g, w := plainJSON(t, after), plainJSON(t, report); g != w {
		t.Errorf("report after pruning:\n%s\nwant\n%s", g, w)
	}
}

func TestCLIRetainUsage(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"-1d", "soon", "1x"} {
		r := run(t, runOpts{env: opEnv}, "run", "--agents", t.TempDir(), "--state", t.TempDir(), "--retain", v)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--retain") {
			t.Errorf("run --retain %s: want a usage error naming the flag\n%s", v, r)
		}
	}
}
