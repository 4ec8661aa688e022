package session

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/sandbox"
)

// defaultPath is the runtime's PATH when the gateway has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// runtimeEnv builds a runtime's environment from nothing: PATH, HOME and
// LANG from the gateway, BCPGW_AGENT, and the definition's env with
// ${VAR} expanded from the gateway's environment. Nothing else of the
// gateway's environment (its secrets included) reaches the runtime unless
// a definition passes it explicitly. A ${VAR} that is not set is an error:
// a runtime started without its API key fails later and less clearly.
func runtimeEnv(def *agents.Definition, lookup func(string) (string, bool)) ([]string, error) {
	env := map[string]string{"PATH": defaultPath}
	for _, k := range []string{"PATH", "HOME", "LANG"} {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	for k, v := range def.Env {
		var missing []string
		env[k], missing = expand(v, lookup)
		if len(missing) > 0 {
			return nil, permanentError{fmt.Errorf("env %s: ${%s} is not set in the gateway's environment", k, strings.Join(missing, "}, ${"))}
		}
	}
	env["BCPGW_AGENT"] = def.Name
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out, nil
}

// expand replaces each ${VAR} in v with its value from lookup, and says
// which were not set (replaced with nothing).
func expand(v string, lookup func(string) (string, bool)) (string, []string) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(v, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		val, ok := lookup(name)
		if !ok {
			missing = append(missing, name)
		}
		return val
	})
	return out, missing
}

// CheckRuntimeProgram says, without starting anything, whether def's
// runtime program can be found (a bare name through the PATH its runtime
// would get, from lookup) and executed. It looks at nothing else (see
// CheckAgent): bcpgw validate warns with it.
func CheckRuntimeProgram(def *agents.Definition, lookup func(string) (string, bool)) error {
	if len(def.Runtime) == 0 {
		return nil
	}
	path := defaultPath
	if v, ok := lookup("PATH"); ok {
		path = v
	}
	if v, ok := def.Env["PATH"]; ok {
		path, _ = expand(v, lookup)
	}
	prog, err := runtimeProgram(def, path)
	if err != nil {
		return err
	}
	return checkExecutable(prog)
}

// runtimeProgram resolves argv[0]: an absolute path as is, a relative path
// with a slash against the definition file's directory (like workdir), a
// bare name through PATH.
func runtimeProgram(def *agents.Definition, path string) (string, error) {
	prog := def.Runtime[0]
	switch {
	case filepath.IsAbs(prog):
		return prog, nil
	case strings.Contains(prog, "/"):
		abs, err := filepath.Abs(filepath.Join(filepath.Dir(def.File), prog))
		if err != nil {
			return "", fmt.Errorf("resolve runtime %s: %w", prog, err)
		}
		return abs, nil
	}
	for _, dir := range filepath.SplitList(path) {
		candidate := filepath.Join(dir, prog)
		if p, err := exec.LookPath(candidate); err == nil {
			return p, nil
		}
	}
	return "", permanentError{fmt.Errorf("runtime %q not found in PATH %s", prog, path)}
}

// permanentError is a start failure that retrying cannot fix (an unset
// ${VAR}, a runtime program missing or not executable): the supervisor
// fails the agent at once, with this as its reason, instead of
// restarting it until it crashed too often. A failed agent is still
// tried again after its cool-down, when the cause may have been fixed.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// Permanent marks the error for the supervisor (as sandbox.Error does).
func (permanentError) Permanent() bool { return true }

// spawnError is why the runtime's process could not be spawned. A
// program that cannot be executed is permanent; so is a sandbox whose
// namespaces the kernel refuses. Running out of processes or memory is
// not: it may pass.
func spawnError(def *agents.Definition, prog string, sandboxed bool, err error) error {
	if sandboxed {
		return sandbox.SpawnError(def.Name, err)
	}
	err = fmt.Errorf("%w%s", err, startHint(prog, err))
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC, syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EPERM:
			return permanentError{err}
		}
	}
	return err
}
