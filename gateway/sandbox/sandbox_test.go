package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	// A descriptor the gateway inherited without close-on-exec (as from
	// a shell) must not reach the runtime.
	fd, err := syscall.Open(secret, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(fd, 40); err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	defer syscall.Close(40)
	out, exit := run(t, Policy{Workdir: work}, `
echo hello > out.txt && echo wrote
cat `+secret+` 2>&1 || echo nosecret
cat /etc/shadow >/dev/null 2>&1 && echo shadow || echo noshadow
ls /proc | grep -c '^[0-9]'
pwd
echo $HOME
touch /usr/x 2>/dev/null && echo usrwritable || echo usrro
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
ls /dev | tr '\n' ' '; echo
hostname
cat /proc/self/fd/40 2>/dev/null && echo fd40leaked || echo fd40closed
exit 3`)
	t.Log(out)
	if exit == nil || exit.Code != 3 {
		t.Fatalf("exit %+v", exit)
	}
	for _, want := range []string{"wrote", "nosecret", "noshadow", "usrro", work,
		// No capability at all, even as the namespace's root; the filter
		// on, privileges frozen.
		"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
		"fd full null random shm stderr stdin stdout urandom zero", "bcpgw-test", "fd40closed"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(work, "out.txt")); string(b) != "hello\n" {
		t.Errorf("workdir write: %q", b)
	}
}

// When the runtime exits, whatever it left running (a setsid daemon
// holding its stdout included) dies with the sandbox's pid namespace:
// the helper exits and the kernel kills the rest, so the pipe closes.
func TestSandboxLeavesNothingBehind(t *testing.T) {
	out, exit := run(t, Policy{}, `setsid sh -c 'sleep 600' & echo started; exit 0`)
	if exit == nil || exit.Code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("exit %+v, output %q", exit, out)
	}
	// run returned: the daemon's copy of stdout is gone, so it is too.
}

func TestCheckProgram(t *testing.T) {
	tools := t.TempDir()
	script := filepath.Join(tools, "agent.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755)
	foreign := filepath.Join(tools, "foreign.sh")
	interp := filepath.Join(t.TempDir(), "interp")
	os.WriteFile(foreign, []byte("#!"+interp+" -x\n"), 0o755)
	viaEnv := filepath.Join(tools, "env.sh")
	os.WriteFile(viaEnv, []byte("#!/usr/bin/env nosuchinterpreter\n"), 0o755)
	shim := filepath.Join(tools, ".pyenv", "shims", "python3")
	os.MkdirAll(filepath.Dir(shim), 0o755)
	os.WriteFile(shim, []byte("#!/bin/sh\nexec pyenv exec python3\n"), 0o755)
	work := t.TempDir()
	base := Policy{Agent: "a", Workdir: work, Env: []string{"PATH=/usr/bin:/bin"}}
	for _, c := range []struct {
		name    string
		program string
		args    []string
		ro      []string
		want    string // "" means fine
	}{
		{"system program", "/bin/sh", nil, nil, ""},
		{"script outside", script, nil, nil, "is a script that is not visible inside the sandbox"},
		{"script made visible", script, nil, []string{tools}, ""},
		{"interpreter outside", foreign, nil, []string{tools + "/x"}, "is a script that is not visible"},
		{"interpreter not visible", foreign, nil, []string{tools}, "the interpreter " + interp + " of runtime " + foreign},
		{"env interpreter missing", viaEnv, nil, []string{tools}, "runs \"nosuchinterpreter\" through env"},
		{"pyenv shim", shim, nil, nil, "pyenv shims run pyenv itself"},
		{"argument outside", "/bin/sh", []string{script}, nil, "runtime argument " + script + " is not visible"},
		{"argument inside", "/bin/sh", []string{script}, []string{tools}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := base
			p.Program, p.Args, p.ReadOnly = c.program, c.args, c.ro
			err := CheckProgram(p)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("CheckProgram = %v, want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("CheckProgram = %v, want %q", err, c.want)
			case err != nil:
				var se *Error
				if !errors.As(err, &se) || !se.Permanent() {
					t.Errorf("error %v is not a permanent *Error", err)
				}
			}
		})
	}
}

// The seccomp filter holds where go-seccomp-bpf's matching alone did
// not: a system call through the i386 entry (int 0x80) kills the
// process instead of reaching unshare, and TIOCSTI is refused by the 32
// bits of the command the kernel reads, whatever the upper bits say.
func TestSeccompGuards(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the probe (the race detector needs one too)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
	if (strcmp(argv[1], "ioctl") == 0) {
		long r = syscall(SYS_ioctl, 0, (1UL << 32) | 0x5412, "x");
		printf("ioctl %ld %s\n", r, strerror(errno));
		return 0;
	}
	long ret;
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(310), "b"(0x10000000) : "memory");
	printf("int80 %ld\n", ret);
	return 0;
}
`), 0o644)
	probe := filepath.Join(dir, "probe")
	if out, err := exec.Command(cc, "-o", probe, src).CombinedOutput(); err != nil {
		t.Skipf("cannot build the probe: %v\n%s", err, out)
	}
	os.Chmod(dir, 0o755)
	for _, c := range []struct {
		arg, want string
		signal    int
	}{
		{"ioctl", "ioctl -1 Operation not permitted", 0},
		{"int80", "", int(syscall.SIGSYS)},
	} {
		p := Policy{Agent: "test", Program: probe, Args: []string{c.arg}, Workdir: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}}
		p.UID, p.GID = Owner(p.Agent)
		cmd, err := Command(p)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Start()
		cmd.Started()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := cmd.WaitReady(ctx); err != nil {
			t.Fatalf("%s: %v", c.arg, err)
		}
		cancel()
		_ = cmd.Wait()
		ex := cmd.Exit()
		cmd.Close()
		switch {
		case ex == nil:
			t.Errorf("%s: no exit status; output %q", c.arg, out.String())
		case c.signal != 0 && ex.Signal != c.signal:
			t.Errorf("%s: exit %+v, output %q; want killed by signal %d", c.arg, ex, out.String(), c.signal)
		case c.want != "" && !strings.Contains(out.String(), c.want):
			t.Errorf("%s: output %q, want %q", c.arg, out.String(), c.want)
		}
	}
}
