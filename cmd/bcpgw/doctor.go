package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/gateway/sandbox"
	"github.com/bcpgw/bcpgw/gateway/session"
)

func newDoctorCmd() *cobra.Command {
	var stateDir string
	var compat compatFlags
	cmd := &cobra.Command{
		Use:   "doctor [AGENTS_DIR]",
		Short: "Say what this machine provides for sandboxes, and what each agent will get",
		Long: `Builds one real sandbox (running true in it) and prints what the kernel
provides: user namespaces, the Landlock ABI, seccomp. Every runtime runs in
such a sandbox; an agent whose sandbox the kernel cannot give does not start.

Given a definitions directory, it also prints, for each agent, the sandbox
it will get (workdir, extra paths, network) and whether its runtime can
start in it: its ${VAR}s set, its program executable and, with its
interpreter, visible inside the sandbox. --state places the default
workdirs (STATE/work/NAME).

Exit status: 0 when everything can run, 1 otherwise.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			m := sandbox.Probe(cmd.Context())
			ok := m.Sandbox == nil
			fmt.Fprintf(w, "kernel        %s\n", m.Kernel)
			if ok {
				fmt.Fprintf(w, "sandbox       ok: user, mount, pid, network, ipc and uts namespaces; no capabilities; no_new_privs\n")
			} else {
				fmt.Fprintf(w, "sandbox       NOT AVAILABLE: %v\n", m.Sandbox)
				fmt.Fprintf(w, "              no agent can start here until this is fixed (or runs with sandbox: none and --allow-unsandboxed)\n")
			}
			if os.Geteuid() == 0 {
				fmt.Fprintf(w, "runs as       root: each agent's sandbox runs as its own unprivileged uid (%d for this probe)\n", m.UID)
			} else {
				fmt.Fprintf(w, "runs as       uid %d (the gateway's user), with no capability inside\n", m.UID)
			}
			switch {
			case m.Landlock == 0:
				fmt.Fprintf(w, "landlock      not offered by this kernel (a second layer only: the namespaces still contain)\n")
			case ok:
				fmt.Fprintf(w, "landlock      ABI %d offered, ABI %d applied\n", m.Landlock, m.LandlockApplied)
			default:
				fmt.Fprintf(w, "landlock      ABI %d offered\n", m.Landlock)
			}
			if ok {
				fmt.Fprintf(w, "seccomp       %v (ptrace, process_vm_*, bpf, keyctl, mount, setns, unshare, perf_event_open, userfaultfd, TIOCSTI, ... refused)\n", m.Seccomp)
			}
			for _, n := range m.Notes {
				fmt.Fprintf(w, "note          %s\n", n)
			}
			if len(args) == 1 {
				opts, err := compat.options(stateDir, false)
				if err != nil {
					return &exitError{code: exitUsage, msg: err.Error()}
				}
				set, err := agents.Load(args[0], opts)
				if err != nil {
					return &exitError{code: exitFailed, msg: "definitions do not load:\n" + err.Error()}
				}
				fmt.Fprintln(w)
				for _, def := range set.Agents {
					fmt.Fprintf(w, "agent %s: %s\n", def.Name, sandboxLine(def, stateDir))
					if err := session.CheckAgent(def, stateDir, os.LookupEnv); err != nil {
						ok = false
						fmt.Fprintf(w, "  CANNOT START: %v\n", err)
					} else if !def.Sandbox.None && m.Sandbox != nil {
						ok = false
						fmt.Fprintf(w, "  CANNOT START: no sandbox on this machine (above)\n")
					} else {
						fmt.Fprintf(w, "  can start\n")
					}
				}
			}
			if !ok {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&stateDir, "state", os.Getenv("BCPGW_STATE"), "state directory, for the default workdirs (env BCPGW_STATE)")
	compat.add(cmd.Flags())
	return cmd
}
