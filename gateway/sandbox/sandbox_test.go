package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

// run starts sh -c script in a sandbox of policy p and returns its
// output and exit.
func run(t *testing.T, p Policy, script string) (string, *Exit) {
	t.Helper()
	p.Program, p.Args = "/bin/sh", []string{"-c", script}
	if p.Agent == "" {
		p.Agent = "test"
	}
	if p.Workdir == "" {
		p.Workdir = t.TempDir()
	}
	if p.UID == 0 && p.GID == 0 {
		p.UID, p.GID = Owner(p.Agent)
	}
	p.Env = append(p.Env, "PATH=/usr/bin:/bin")
	c, err := Command(p)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Start()
	c.Started()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		c.Wait()
		t.Fatalf("sandbox not up: %v\n%s", err, out.String())
	}
	_ = c.Wait()
	return out.String(), c.Exit()
}

func TestSandboxBasics(t *testing.T) {
	work := t.TempDir()
	if os.Geteuid() == 0 {
		os.Chown(work, AgentUID("test"), AgentUID("test"))
	}
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret"), 0o644)
	out, exit := run(t, Policy{Workdir: work}, `
echo hello > out.txt && echo wrote
cat `+secret+` 2>&1 || echo nosecret
cat /etc/shadow >/dev/null 2>&1 && echo shadow || echo noshadow
ls /proc | grep -c '^[0-9]'
pwd
echo $HOME
touch /usr/x 2>/dev/null && echo usrwritable || echo usrro
exit 3`)
	t.Log(out)
	if exit == nil || exit.Code != 3 {
		t.Fatalf("exit %+v", exit)
	}
	for _, want := range []string{"wrote", "nosecret", "noshadow", "usrro", work} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(work, "out.txt")); string(b) != "hello\n" {
		t.Errorf("workdir write: %q", b)
	}
}
