package main

// Containment (PROTOCOL.md section 8), end to end: a real `bcpgw run`
// with a hostile Reader (internal/hostilert) that tries, with the real
// paths and pids of the running gateway, everything an earlier attacker
// did against an unsandboxed gateway: find the state directory through
// /proc, use the control socket to approve its own Cat-3 item and prompt
// the Controller, open the database, edit the definitions, read the
// Controller's files and environment, type into its stdin, stop or kill
// it and the gateway, overwrite its program, read /etc/shadow, reach a
// service on the host's loopback, and leave a setsid daemon holding its
// stdout. Each must fail with the kind of error that shows why (ENOENT:
// not there at all; ESRCH: no such process in its pid namespace; EACCES;
// a -32007 refusal), while its publish still gets its
// bcp_validation_result and the Controller its delivery, and the stop of
// the gateway is not held up by the daemon.
//
// The gateway runs as the test's user and, when the tests run as root,
// both as root and re-executed as an unprivileged uid.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
	"github.com/bcpgw/bcpgw/gateway/session"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// containmentLeakFD is the descriptor of a secret file the gateway is
// started with, not close-on-exec; the next is its state directory.
const containmentLeakFD = 20

// containmentUnprivUID is the uid (and gid) the gateway is re-executed as
// when the tests run as root: nobody.
const containmentUnprivUID = 65534

var (
	hostilertOnce sync.Once
	hostilertBin  string
	hostilertErr  error
)

// hostilert builds the hostile runtime once, next to the binaries
// TestMain built (and removes).
func hostilert(t *testing.T) string {
	t.Helper()
	hostilertOnce.Do(func() {
		hostilertBin = filepath.Join(filepath.Dir(bin), "hostilert")
		hostilertErr = testproc.Build(map[string]string{hostilertBin: "../../internal/hostilert"})
	})
	if hostilertErr != nil {
		t.Fatal(hostilertErr)
	}
	return hostilertBin
}

// containmentOutcome is one line of hostilert's report.
type containmentOutcome struct {
	Attack string `json:"attack"`
	Target string `json:"target"`
	OK     bool   `json:"ok"`
	Errno  string `json:"errno"`
	Code   int    `json:"code"`
	Error  string `json:"error"`
	Detail string `json:"detail"`
	PPID   int    `json:"ppid"`
}

func (o containmentOutcome) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// containmentScenario is one way of running the gateway.
type containmentScenario struct {
	name string
	// cred, if set, is who the gateway and the CLI run as; nil: the
	// test's own user.
	cred *syscall.Credential
	// unsandboxed runs the hostile Reader with sandbox: none (and the
	// gateway with --allow-unsandboxed).
	unsandboxed bool
	// secret adds a file root:root 0640, visible in the sandbox
	// read-only, that the runtime must not read (only when the tests run
	// as root): a root gateway's supplementary groups (a root login shell
	// is in group root) must not reach its sandboxes.
	secret bool
}

func TestContainment(t *testing.T) {
	t.Parallel()
	hostilert(t)
	var scenarios []containmentScenario
	if os.Getuid() == 0 {
		scenarios = append(scenarios,
			// Root as a login shell has it: in group root too.
			containmentScenario{name: "root", cred: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{0}}, secret: true},
			containmentScenario{name: "unprivileged", cred: &syscall.Credential{Uid: containmentUnprivUID, Gid: containmentUnprivUID}, secret: true})
	} else {
		scenarios = append(scenarios, containmentScenario{name: "uid" + strconv.Itoa(os.Getuid())})
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			containmentRun(t, sc)
		})
	}
}

// An unsandboxed runtime (sandbox: none, allowed by --allow-unsandboxed)
// is used here on purpose: a sandboxed one cannot even see the control
// socket (TestContainment checks that it gets ENOENT), so it cannot test
// the socket's own defence, the peer policy, which must hold for
// unsandboxed runtimes and against a sandbox that leaks the socket. Such a
// runtime runs as the gateway's user, passes the uid check, connects, and
// must still be refused with -32007 because it descends from the gateway;
// so must the double-forked daemon it leaves, whose parent is gone (the
// gateway, a child subreaper, adopts it).
func TestContainmentUnsandboxedControlSocket(t *testing.T) {
	t.Parallel()
	hostilert(t)
	scenarios := []containmentScenario{{name: "uid" + strconv.Itoa(os.Getuid()), unsandboxed: true}}
	if os.Getuid() == 0 {
		scenarios = append(scenarios, containmentScenario{name: "unprivileged", unsandboxed: true,
			cred: &syscall.Credential{Uid: containmentUnprivUID, Gid: containmentUnprivUID}})
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			containmentRun(t, sc)
		})
	}
}

// containmentNeedsUserns skips the test when the gateway's uid cannot
// create a user namespace, which every sandbox needs.
func containmentNeedsUserns(t *testing.T, cred *syscall.Credential) {
	t.Helper()
	path, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("cannot check for user namespaces: unshare (util-linux) is not installed: %v", err)
	}
	cmd := exec.Command(path, "-U", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		who := "this user"
		if cred != nil {
			who = "uid " + strconv.Itoa(int(cred.Uid))
		}
		t.Skipf("sandboxes are impossible here: `unshare -U true` as %s failed (%v: %s); unprivileged user namespaces are off "+
			"(kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor/SELinux restriction)", who, err, strings.TrimSpace(string(out)))
	}
}

// containmentEnv is a gateway with its hostile Reader, as one scenario
// runs it.
type containmentEnv struct {
	t         *testing.T
	sc        containmentScenario
	root      string // everything of the test: bin, agents, secret, state
	bin       string // the copies of bcpgw, testrt and hostilert
	agents    string
	state     string
	secret    string // a root:root 0640 file, or ""
	loopback  net.Listener
	accepted  atomic.Int32 // connections to the loopback service
	udp       net.PacketConn
	datagrams atomic.Int32 // datagrams to the loopback UDP service
	cmd       *exec.Cmd
	stderr    *testproc.Buffer
	exited    chan struct{}
	exitErr   error
	gwSecret  string // a value only the gateway's environment has
	marker    string // a file name the attacker writes in its /tmp and /dev/shm
	leak      string // a file the gateway is started with open (not close-on-exec)
}

func containmentRun(t *testing.T, sc containmentScenario) {
	containmentNeedsUserns(t, sc.cred)
	e := newContainmentEnv(t, sc)
	e.start()

	// Both agents run; the pids the attacker gets are the real ones.
	var peer control.Agent
	containmentWait(t, "main and researcher running", func() (bool, string) {
		all := e.agentsList()
		for _, a := range all {
			if a.State == "failed" {
				t.Fatalf("agent %s failed: %s\n%s", a.Name, a.LastError, e.stderr)
			}
		}
		peer = all["main"]
		return peer.State == "running" && peer.PID > 0 && all["researcher"].State == "running", fmt.Sprintf("%+v\n%s", all, e.stderr)
	})
	peerInit := peer.PID // the sandbox's init (the helper), or the runtime itself without a sandbox
	peerPID := containmentChild(t, peerInit)
	gwPID := e.cmd.Process.Pid
	prompt := fmt.Sprintf(`{"gateway_pid": %d, "peer_pid": %d, "peer_init_pid": %d}`, gwPID, peerPID, peerInit)
	if r := e.cli("prompt", "researcher", prompt); r.code != 0 {
		t.Fatalf("bcpgw prompt: %s\ngateway log:\n%s", r, e.stderr)
	}
	var outs []containmentOutcome
	containmentWait(t, "the hostile runtime's report", func() (bool, string) {
		outs = e.report()
		return slices.ContainsFunc(outs, func(o containmentOutcome) bool { return o.Attack == "done" }), fmt.Sprintf("%v\n%s", outs, e.stderr)
	})
	t.Logf("report of the hostile runtime (gateway pid %d, controller pid %d, its init %d):", gwPID, peerPID, peerInit)
	for _, o := range outs {
		t.Logf("  %s", o)
	}
	byAttack := map[string][]containmentOutcome{}
	for _, o := range outs {
		byAttack[o.Attack] = append(byAttack[o.Attack], o)
	}
	expect := func(attack string, errnos ...string) {
		t.Helper()
		got := byAttack[attack]
		if len(got) == 0 {
			t.Errorf("%s: not attempted", attack)
		}
		for _, o := range got {
			switch {
			case o.OK:
				t.Errorf("CONTAINMENT HOLE: %s succeeded: %s", attack, o)
			case len(errnos) > 0 && !slices.Contains(errnos, o.Errno):
				t.Errorf("%s: failed with %q, want %s: %s", attack, o.Errno, strings.Join(errnos, " or "), o)
			}
		}
	}
	refused := func(attack string) {
		t.Helper()
		got := byAttack[attack]
		if len(got) == 0 {
			t.Errorf("%s: not attempted", attack)
		}
		for _, o := range got {
			if o.OK || o.Code != control.CodePermission {
				t.Errorf("CONTAINMENT HOLE: %s was not refused with %d: %s", attack, control.CodePermission, o)
			}
		}
	}

	controlAttacks := []string{"control_approvals_list", "control_approve", "control_prompt"}
	if sc.unsandboxed {
		for _, a := range controlAttacks {
			refused(a)
		}
		// The daemon, orphaned and adopted by the gateway, is refused too.
		alive := byAttack["daemon_alive"]
		if len(alive) != 1 || alive[0].PPID != gwPID {
			t.Errorf("the unsandboxed daemon: %v; want one, adopted by the gateway (pid %d)", alive, gwPID)
		}
		for _, a := range controlAttacks {
			refused("daemon_" + a)
		}
		if !strings.Contains(e.stderr.String(), "descends from the gateway") {
			t.Errorf("the gateway did not log why it refused the runtime's connections:\n%s", e.stderr)
		}
	} else {
		for _, a := range controlAttacks {
			expect(a, "ENOENT")
		}
		// Hidden: not there at all.
		for _, a := range []string{"gateway_cmdline", "gateway_environ", "peer_environ", "peer_init_environ", "peer_stdin",
			"state_db_rw", "peer_workdir_read", "peer_workdir_write", "peer_program_write"} {
			expect(a, "ENOENT")
		}
		expect("state_dir_list") // the path exists (the workdir is under it), but holds neither the database nor the socket
		expect("own_environ_secret")
		expect("agents_append", "ENOENT", "EROFS", "EACCES")
		expect("agents_create", "ENOENT", "EROFS", "EACCES")
		expect("own_program_write", "EROFS", "EACCES", "ETXTBSY")
		for _, a := range []string{"peer_sigstop", "peer_sigkill", "peer_init_sigkill", "gateway_sigstop", "gateway_sigterm", "gateway_pidfd"} {
			expect(a, "ESRCH")
		}
		expect("peer_ptrace", "EPERM", "ESRCH")
		expect("etc_shadow", "EACCES")
		if e.secret != "" {
			expect("read:"+e.secret, "EACCES")
		}
		// EACCES is Landlock's TCP rule (ABI 4 and later), which is
		// checked before the connection is routed; UDP, which Landlock
		// does not restrict, shows the network namespace itself.
		expect("host_loopback_tcp", "ECONNREFUSED", "ENETUNREACH", "EACCES")
		expect("host_loopback_udp", "ECONNREFUSED", "ENETUNREACH")
		expect("unshare_user", "EPERM")
		expect("mount_tmpfs", "EPERM")
		expect("setgroups", "EPERM")
		// The gateway was started with a descriptor of a secret file
		// left open (as a careless parent, a shell redirection or a
		// supervisor leaves them): only the three pipes may reach the
		// runtime.
		expect("inherited_fds")
		expect("inherited_fd_read")
		expect("inherited_dir_db")
		expect("inherited_dir_control")
		expect("init_environ", "EACCES")
		expect("init_fds", "EACCES")
		if m := byAttack["tmp_marker"]; len(m) != 1 || m[0].Detail == "" {
			t.Errorf("the hostile runtime could not write in its own /tmp and /dev/shm: %v", m)
		}
		for _, dir := range []string{os.TempDir(), "/tmp", "/dev/shm"} {
			p := filepath.Join(dir, e.marker)
			if _, err := os.Stat(p); err == nil {
				os.Remove(p)
				t.Errorf("CONTAINMENT HOLE: the hostile runtime's file %s is on the host", p)
			}
		}
		if n, d := e.accepted.Load(), e.datagrams.Load(); n != 0 || d != 0 {
			t.Errorf("CONTAINMENT HOLE: the host's loopback services got %d connections and %d datagrams", n, d)
		}
		if len(byAttack["daemon_alive"]) != 1 {
			t.Errorf("the hostile runtime left no daemon: %v", byAttack["daemon"])
		}
		// The Controller and the gateway were not stopped.
		for what, pid := range map[string]int{"the controller": peerPID, "its sandbox's init": peerInit, "the gateway": gwPID} {
			if st := containmentProcState(pid); st != "S" && st != "R" {
				t.Errorf("%s (pid %d) is in state %q after the attacks", what, pid, st)
			}
		}
	}
	for _, a := range []string{"daemon", "prompt"} {
		for _, o := range byAttack[a] {
			t.Errorf("the hostile runtime could not run its attacks: %s", o)
		}
	}

	// Contained, it still works: its publish was validated, and the
	// Controller got the delivery.
	if v := byAttack["verdict_alert"]; len(v) != 1 || !v[0].OK || !strings.Contains(v[0].Detail, "Published to controller main (Cat-1, 1.0 bits)") {
		t.Errorf("the hostile Reader's Cat-1 publish: %v; want bcp_validation_result success", v)
	}
	containmentWait(t, "the delivery to the controller", func() (bool, string) {
		recs := e.testrtLog()
		return slices.ContainsFunc(recs, func(r testrtRecord) bool {
			return r.Event == "applied" && string(r.Response) == `{"urgent":true}`
		}), fmt.Sprintf("%+v", recs)
	})
	// Its own Cat-3 item is still waiting for a person.
	var pending []control.Approval
	containmentWait(t, "the hostile Reader's Cat-3 item", func() (bool, string) {
		r := e.cli("approvals", "list", "--json", "--status", "all")
		pending = nil
		if r.code == 0 {
			_ = json.Unmarshal([]byte(r.stdout), &pending)
		}
		return len(pending) > 0, r.String()
	})
	for _, a := range pending {
		if a.Reader != "researcher" || a.SubscriptionID != "digest" || a.Status != "pending" || a.DecidedBy != "" {
			t.Errorf("CONTAINMENT HOLE: the hostile Reader's approval item was decided: %+v", a)
		}
	}

	// A stop is not held up by the daemon, and nothing outlives it.
	daemons := containmentDaemons(e.bin)
	if !sc.unsandboxed {
		if len(daemons) == 0 {
			t.Errorf("the hostile runtime's daemon is not running before the stop")
		}
		// It holds the runtime's stdout, the pipe the gateway reads.
		runtimePID := containmentChild(t, e.agentsList()["researcher"].PID, daemons...)
		if want, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", runtimePID)); err != nil {
			t.Logf("cannot see the runtime's stdout (%v): not checking the daemon's", err)
		} else {
			for _, d := range daemons {
				if got, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", d)); err != nil || got != want {
					t.Errorf("the daemon (pid %d) has stdout %q (%v), want the runtime's %q", d, got, err, want)
				}
			}
		}
	}
	took := e.stop()
	limit := session.DefaultGrace + 5*time.Second
	t.Logf("the gateway stopped %v after SIGTERM (bound: grace %v + 5s); daemons before the stop: %v", took.Round(time.Millisecond), session.DefaultGrace, daemons)
	if took > limit {
		t.Errorf("the stop took %v, more than the grace and a margin (%v)", took, limit)
	}
	deadline := time.Now().Add(2 * time.Second)
	for left := containmentDaemons(e.bin); len(left) > 0; left = containmentDaemons(e.bin) {
		if time.Now().After(deadline) {
			t.Errorf("CONTAINMENT HOLE: the hostile runtime's daemon outlived the gateway: pids %v", left)
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newContainmentEnv lays out the test's files under one short directory
// (the control socket's path must fit a sockaddr_un) that the gateway's
// uid can use, with copies of the binaries it may execute.
func newContainmentEnv(t *testing.T, sc containmentScenario) *containmentEnv {
	t.Helper()
	root, err := os.MkdirTemp("", "ct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	e := &containmentEnv{t: t, sc: sc, root: root, bin: filepath.Join(root, "bin"), agents: filepath.Join(root, "agents"),
		state: filepath.Join(root, "s"), gwSecret: fmt.Sprintf("ct-secret-%d", time.Now().UnixNano())}
	e.marker = "bcpgw-hostile-" + filepath.Base(root)
	e.leak = filepath.Join(root, "leaked-secret")
	if err := os.WriteFile(e.leak, []byte("a secret of the gateway's parent\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{e.bin, e.agents} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if sc.cred != nil {
		// The gateway creates its state directory here.
		if err := os.Chown(root, int(sc.cred.Uid), int(sc.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, src := range []string{bin, testrt, hostilertBin} {
		containmentCopy(t, src, filepath.Join(e.bin, filepath.Base(src)))
	}
	if sc.secret && os.Getuid() == 0 {
		dir := filepath.Join(root, "secret")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		e.secret = filepath.Join(dir, "root-group-only")
		if err := os.WriteFile(e.secret, []byte("only root and group root may read this\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(e.secret, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.loopback = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			_, _ = io.WriteString(c, "the host's loopback service\n")
			c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.udp = pc
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 256)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			e.datagrams.Add(1)
			_, _ = pc.WriteTo([]byte("the host's loopback UDP service\n"), from)
		}
	}()
	e.writeDefs()
	return e
}

func containmentCopy(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// writeDefs writes main (testrt, the Controller) and researcher
// (hostilert, the Reader); both autostart. The attacker's targets come
// from the gateway's environment through ${VAR}.
func (e *containmentEnv) writeDefs() {
	t := e.t
	sandbox := ""
	mode := "all"
	switch {
	case e.sc.unsandboxed:
		sandbox, mode = "sandbox: none\n", "control"
	case e.secret != "":
		sandbox = fmt.Sprintf("sandbox: {read_only: [%q]}\n", filepath.Dir(e.secret))
	}
	files := map[string]string{
		"main.md": fmt.Sprintf(`---
name: main
runtime: [%q]
autostart: true
tools: [BCPQuery]
env: {TESTRT_LOG: main.log}
bcp_channels:
  - peer: researcher
    role: controller
    max_category: 3
    budget_bits: 100000
    subscriptions:
      - {id: alerts, category: 1, fields: [{name: urgent, type: boolean}]}
      - {id: digest, category: 3, directive: "Summarize what changed today.", max_words: 20}
---
The Controller.
`, filepath.Join(e.bin, "testrt")),
		"researcher.md": fmt.Sprintf(`---
name: researcher
runtime: [%q]
autostart: true
tools: [BCPPublish]
%senv:
  HOSTILE_MODE: %s
  HOSTILE_STATE: "${CT_STATE}"
  HOSTILE_AGENTS: "${CT_AGENTS}"
  HOSTILE_PEER_WORKDIR: "${CT_PEER_WORKDIR}"
  HOSTILE_PEER_PROGRAM: "${CT_PEER_PROGRAM}"
  HOSTILE_LOOPBACK: "${CT_LOOPBACK}"
  HOSTILE_LOOPBACK_UDP: "${CT_LOOPBACK_UDP}"
  HOSTILE_READ: "${CT_READ}"
  HOSTILE_SECRET_NAME: CT_GATEWAY_SECRET
  HOSTILE_MARKER: %s
bcp_channels:
  - {peer: main, role: reader, max_category: 3, budget_bits: 100000}
---
The hijacked Reader.
`, filepath.Join(e.bin, "hostilert"), sandbox, mode, e.marker),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(e.agents, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs `bcpgw run` as the scenario's user and waits until its
// control socket answers.
func (e *containmentEnv) start() {
	t := e.t
	t.Helper()
	args := []string{"run", "--agents", e.agents, "--state", e.state, "--log-level", "debug"}
	if e.sc.unsandboxed {
		args = append(args, "--allow-unsandboxed")
	}
	cmd := exec.Command(filepath.Join(e.bin, "bcpgw"), args...)
	cmd.Env = append(baseEnv(), "BCPGW_STATE=",
		"CT_STATE="+e.state, "CT_AGENTS="+e.agents,
		"CT_PEER_WORKDIR="+filepath.Join(e.state, "work", "main"),
		"CT_PEER_PROGRAM="+filepath.Join(e.bin, "testrt"),
		"CT_LOOPBACK="+e.loopback.Addr().String(),
		"CT_LOOPBACK_UDP="+e.udp.LocalAddr().String(),
		"CT_READ="+e.secret,
		"CT_GATEWAY_SECRET="+e.gwSecret)
	cmd.Dir = e.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.sc.cred}
	e.stderr = &testproc.Buffer{}
	cmd.Stderr = e.stderr
	// Its parent leaves descriptors open: a secret file and the state
	// directory (made beforehand), as fds 20 and 21 of the gateway
	// (above those the gateway passes to its sandbox helper, which would
	// replace low ones).
	leak, err := os.Open(e.leak)
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	if err := os.Mkdir(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if e.sc.cred != nil {
		if err := os.Chown(e.state, int(e.sc.cred.Uid), int(e.sc.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	stateDir, err := os.Open(e.state)
	if err != nil {
		t.Fatal(err)
	}
	defer stateDir.Close()
	cmd.ExtraFiles = make([]*os.File, containmentLeakFD-3+2)
	cmd.ExtraFiles[containmentLeakFD-3] = leak
	cmd.ExtraFiles[containmentLeakFD-3+1] = stateDir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.cmd = cmd
	e.exited = make(chan struct{})
	go func() {
		e.exitErr = cmd.Wait()
		close(e.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-e.exited:
		default:
			_ = cmd.Process.Kill()
			<-e.exited
		}
	})
	containmentWait(t, "the control socket to answer", func() (bool, string) {
		select {
		case <-e.exited:
			t.Fatalf("bcpgw run exited early (%v)\n%s", e.exitErr, e.stderr)
		default:
		}
		r := e.cli("status")
		return r.code == 0, r.String()
	})
}

// stop sends SIGTERM and returns how long the gateway took to exit.
func (e *containmentEnv) stop() time.Duration {
	t := e.t
	t.Helper()
	begin := time.Now()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.exited:
	case <-time.After(time.Minute):
		t.Fatalf("bcpgw run did not stop within a minute of SIGTERM\n%s", e.stderr)
	}
	took := time.Since(begin)
	if e.exitErr != nil {
		t.Errorf("bcpgw run exited with %v after SIGTERM\n%s", e.exitErr, e.stderr)
	}
	return took
}

// cli runs a client command as the gateway's user (a gateway that is not
// root refuses root's connections: it cannot read root's namespaces).
func (e *containmentEnv) cli(args ...string) result {
	t := e.t
	t.Helper()
	cmd := exec.Command(filepath.Join(e.bin, "bcpgw"), append(slices.Clone(args), "--state", e.state)...)
	cmd.Env = append(baseEnv(), "BCPGW_STATE=")
	cmd.Dir = e.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.sc.cred}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("bcpgw %q: timed out", args)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("bcpgw %q: %v", args, err)
	}
	return r
}

func (e *containmentEnv) agentsList() map[string]control.Agent {
	r := e.cli("agents", "--json")
	var all []control.Agent
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &all) != nil {
		return nil
	}
	m := map[string]control.Agent{}
	for _, a := range all {
		m[a.Name] = a
	}
	return m
}

// report reads the hostile runtime's report from its workdir.
func (e *containmentEnv) report() []containmentOutcome {
	f, err := os.Open(filepath.Join(e.state, "work", "researcher", "report.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []containmentOutcome
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o containmentOutcome
		if json.Unmarshal(sc.Bytes(), &o) == nil {
			out = append(out, o)
		}
	}
	return out
}

func (e *containmentEnv) testrtLog() []testrtRecord {
	return readTestrtLog(e.t, filepath.Join(e.state, "work", "main", "main.log"))
}

// containmentWait polls cond for up to 30s.
func containmentWait(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s\n%s", what, why)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// containmentStat reads a process's state and parent pid.
func containmentStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid, true
}

func containmentProcState(pid int) string {
	st, _, _ := containmentStat(pid)
	return st
}

func containmentPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// containmentChild is the runtime under a sandbox's init: its only child
// but those in except, the orphans it adopted (without a sandbox, the
// runtime is the session's process itself).
func containmentChild(t *testing.T, pid int, except ...int) int {
	t.Helper()
	var kids []int
	for _, p := range containmentPIDs() {
		if _, ppid, ok := containmentStat(p); ok && ppid == pid && !slices.Contains(except, p) {
			kids = append(kids, p)
		}
	}
	switch len(kids) {
	case 0:
		return pid
	case 1:
		return kids[0]
	}
	t.Fatalf("pid %d has %d children %v; want the runtime only", pid, len(kids), kids)
	return 0
}

// containmentDaemons lists the live processes that run hostilert's
// daemon from dir.
func containmentDaemons(dir string) []int {
	var out []int
	prog := filepath.Join(dir, "hostilert")
	for _, p := range containmentPIDs() {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(args) >= 2 && args[0] == prog && args[1] == "daemon" {
			out = append(out, p)
		}
	}
	return out
}
