package session

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bcpgw/bcpgw/agents"
)

// benchSession starts sessions of the scriptable test runtime (a Go
// program) sandboxed or not, in the same run so the two can be compared.
func benchConfig(b *testing.B, sandboxed bool, helper string) Config {
	b.Helper()
	dir := b.TempDir()
	def := &agents.Definition{
		Name: "bench", File: filepath.Join(dir, "bench.md"), Runtime: []string{testrtPath},
		Env: map[string]string{"TESTRT_LOG": filepath.Join(agents.DefaultWorkdir(dir, "bench"), "testrt.log")},
	}
	def.Sandbox.None = !sandboxed
	return Config{
		Def: def, WorkRoot: filepath.Join(dir, "work"), Logger: hclog.NewNullLogger(), Grace: time.Second, SandboxHelper: helper,
		LookupEnv: func(k string) (string, bool) {
			if k == "PATH" {
				return os.Getenv("PATH"), true
			}
			return "", false
		},
	}
}

// BenchmarkSessionStart measures spawn-to-ready of one session, and the
// memory an idle session holds (resident set and proportional set of
// every process of the session: the sandbox's init and the runtime).
// go test -run '^$' -bench SessionStart -benchtime 50x ./gateway
// Memory is measured on the first session of each run, once idle.
func BenchmarkSessionStart(b *testing.B) {
	for _, v := range []struct {
		name      string
		sandboxed bool
		helper    string
	}{
		{"none", false, ""},
		{"sandboxed", true, helperPath},                   // bcpgw-sandbox, as bin/bcpgw runs it
		{"sandboxed-self-reexec", true, "/proc/self/exe"}, // the fallback: the whole binary as init
	} {
		b.Run(v.name, func(b *testing.B) {
			cfg := benchConfig(b, v.sandboxed, v.helper)
			ctx := context.Background()
			var rss, pss int64
			for i := 0; i < b.N; i++ {
				s, err := Start(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					b.StopTimer()
					time.Sleep(200 * time.Millisecond) // let it settle idle
					rss, pss = sessionMemory(s.Pid())
					b.StartTimer()
				}
				b.StopTimer()
				if err := s.Stop(ctx, "bench"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(rss), "rss-KiB/session")
			b.ReportMetric(float64(pss), "pss-KiB/session")
		})
	}
}

// sessionMemory sums VmRSS and Pss (KiB) over pid and its descendants.
func sessionMemory(pid int) (rss, pss int64) {
	for _, p := range append([]int{pid}, descendants(pid)...) {
		rss += procField(fmt.Sprintf("/proc/%d/status", p), "VmRSS:")
		pss += procField(fmt.Sprintf("/proc/%d/smaps_rollup", p), "Pss:")
	}
	return rss, pss
}

func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

func procField(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}
