package gateway

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/bcpgw/bcpgw/agents"
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
		env[k] = envRef.ReplaceAllStringFunc(v, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			val, ok := lookup(name)
			if !ok {
				missing = append(missing, name)
			}
			return val
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("env %s: ${%s} is not set in the gateway's environment", k, strings.Join(missing, "}, ${"))
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
	return "", fmt.Errorf("runtime %q not found in PATH %s", prog, path)
}
