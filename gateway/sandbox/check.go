package sandbox

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Permanent marks a sandbox error as one that retrying cannot fix: the
// agent fails at once instead of crash-looping.
func (e *Error) Permanent() bool { return true }

// CheckProgram catches, before anything is spawned, a runtime that could
// not run inside p's sandbox: a script whose interpreter is outside the
// visible paths (a pyenv shim, a venv in a home directory), a program
// outside them that is a script or needs libraries next to it, a
// dynamic loader that is not visible, or an argument naming a file that
// the sandbox will not have. Each error names the path and what to add.
func CheckProgram(p Policy) error {
	fail := func(format string, args ...any) error {
		return &Error{Agent: p.Agent, Msg: fmt.Sprintf(format, args...)}
	}
	hint := func(path string) string {
		if strings.Contains(path, "/.pyenv/shims/") {
			return fmt.Sprintf("pyenv shims run pyenv itself: name the interpreter's real path (pyenv which %s) in runtime and add its version directory to sandbox.read_only", filepath.Base(path))
		}
		return fmt.Sprintf("add %s to sandbox.read_only", filepath.Dir(path))
	}
	visible := Visible(p, p.Program)
	kind, interp, err := programKind(p.Program)
	if err != nil {
		return fail("runtime %s: %v", p.Program, err)
	}
	switch kind {
	case "script":
		if !visible {
			return fail("runtime %s is a script that is not visible inside the sandbox (its interpreter would not find its files): %s", p.Program, hint(p.Program))
		}
		name, arg := interp[0], ""
		if len(interp) > 1 {
			arg = interp[1]
		}
		if filepath.Base(name) == "env" && arg != "" && !strings.HasPrefix(arg, "-") {
			// Inside, env finds the first match in a visible directory.
			found := lookPath(arg, p.Env)
			if len(found) == 0 {
				return fail("runtime %s runs %q through env, which is not in the runtime's PATH", p.Program, arg)
			}
			name = found[0]
			for _, c := range found {
				if Visible(p, c) {
					name = c
					break
				}
			}
		}
		if !Visible(p, name) {
			return fail("the interpreter %s of runtime %s is not visible inside the sandbox: %s", name, p.Program, hint(name))
		}
	case "elf":
		if interp != nil && !Visible(p, interp[0]) {
			return fail("runtime %s needs the dynamic loader %s, which is not visible inside the sandbox: %s", p.Program, interp[0], hint(interp[0]))
		}
		if !visible {
			if rpath := originPath(p.Program); rpath != "" {
				return fail("runtime %s loads libraries from %s next to it, which is not visible inside the sandbox: %s", p.Program, rpath, hint(p.Program))
			}
		}
	}
	for _, a := range p.Args {
		if !filepath.IsAbs(a) {
			continue
		}
		if _, err := os.Stat(a); err == nil && !Visible(p, a) {
			return fail("runtime argument %s is not visible inside the sandbox: %s", a, hint(a))
		}
	}
	return nil
}

// programKind tells an ELF program (with its dynamic loader, if any) from
// a script (with its #! line split into interpreter and argument).
func programKind(path string) (kind string, interp []string, err error) {
	// Non-blocking, and only a regular file is read: a program that a
	// runtime could have swapped for a FIFO must not stall the start.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", nil, unwrapPath(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", nil, errors.New("not a regular file")
	}
	head := make([]byte, 256)
	n, _ := f.Read(head)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte("#!")):
		line, _, _ := bufio.NewReader(bytes.NewReader(head[2:])).ReadLine()
		fields := strings.Fields(string(line))
		if len(fields) == 0 {
			return "", nil, errors.New("its #! line names no interpreter")
		}
		if len(fields) > 2 {
			fields = []string{fields[0], strings.Join(fields[1:], " ")}
		}
		return "script", fields, nil
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		e, err := elf.NewFile(f)
		if err != nil {
			return "elf", nil, nil
		}
		defer e.Close()
		for _, prog := range e.Progs {
			if prog.Type == elf.PT_INTERP {
				if prog.Filesz == 0 || prog.Filesz > 4096 {
					return "", nil, fmt.Errorf("its dynamic loader's name is %d bytes long: not a program to run", prog.Filesz)
				}
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err == nil {
					return "elf", []string{string(bytes.TrimRight(b, "\x00"))}, nil
				}
			}
		}
		return "elf", nil, nil
	}
	return "other", nil, nil
}

// originPath returns the first RPATH or RUNPATH entry of an ELF program
// that is relative to the program ($ORIGIN), resolved; "" if none.
func originPath(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<30 {
		return ""
	}
	e, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	defer e.Close()
	var entries []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := e.DynString(tag)
		for _, v := range vals {
			entries = append(entries, filepath.SplitList(v)...)
		}
	}
	for _, ent := range entries {
		if strings.Contains(ent, "$ORIGIN") || strings.Contains(ent, "${ORIGIN}") {
			dir := strings.NewReplacer("${ORIGIN}", filepath.Dir(path), "$ORIGIN", filepath.Dir(path)).Replace(ent)
			return filepath.Clean(dir)
		}
	}
	return ""
}

// lookPath finds name in the PATH of env: every match, in order.
func lookPath(name string, env []string) []string {
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var out []string
	for _, dir := range filepath.SplitList(path) {
		c := filepath.Join(dir, name)
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			out = append(out, c)
		}
	}
	return out
}

// SpawnError explains why the sandbox's helper could not be spawned. The
// kernel refusing the namespaces (user namespaces off, or a limit on
// them at 0) is an *Error, permanent, that says so; anything else
// (no memory, too many processes) is returned as it is, and may pass.
func SpawnError(agent string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err
	}
	var why string
	switch errno {
	case syscall.ENOSPC:
		why = "a limit on namespaces is 0 or reached (sysctl user.max_user_namespaces and its kin)"
	case syscall.EPERM:
		why = "this system does not let the gateway's user create user namespaces (sysctl kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns, or a container's policy)"
	case syscall.EINVAL:
		why = "the kernel lacks a kind of namespace the sandbox needs (user, mount, pid, network, ipc, uts)"
	case syscall.EUSERS:
		why = "user namespaces are nested too deeply here"
	default:
		return err
	}
	return &Error{Agent: agent, Msg: fmt.Sprintf("the kernel refused its namespaces (%v): %s; bcpgw doctor shows what this machine provides", errno, why)}
}
