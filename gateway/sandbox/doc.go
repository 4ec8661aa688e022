// Package sandbox runs an agent's runtime in a sandbox of its own: the
// operating-system half of BCP's promise. The pipe between a Reader and a
// Controller is validated and budgeted by the gateway; this package makes
// sure a hijacked runtime (real runtimes have a shell tool) cannot reach
// around the pipe: not the control socket, the state, the definitions,
// other agents' files or processes, the gateway's secrets, the host's
// loopback services.
//
// # How
//
// The gateway re-executes its own binary (/proc/self/exe) as a small
// helper, started by the kernel in new user, mount, pid, ipc, uts and
// (unless the policy says network: host) network namespaces. No setuid
// helper or daemon is involved. The helper, as root of its user namespace
// only:
//
//  1. builds a fresh root on a tmpfs: /usr, /etc and the /bin, /lib*, /sbin
//     links or directories read-only; the runtime's program read-only; the
//     workdir and the read_write paths writable at the same path as
//     outside; the read_only paths read-only; a private /tmp and HOME; its
//     own /proc; a /dev with null, zero, full, random, urandom and shm only;
//  2. pivots into it and drops the old root, so nothing else of the host's
//     file system is reachable;
//  3. brings up loopback and, for network: [destinations], relays
//     127.0.0.1:3128 to the gateway's egress proxy for this agent;
//  4. drops every capability (bounding set included) and sets
//     no_new_privs, restricts itself with Landlock where the kernel has it
//     (the ABI is reported), and loads a seccomp filter refusing ptrace,
//     process_vm_*, bpf, keyctl, mount and friends, setns, unshare and
//     namespace flags to clone, perf_event_open, userfaultfd, io_uring and
//     TIOCSTI, and killing any system call made through another
//     architecture's entry (i386's int 0x80);
//  5. starts the runtime with the gateway's pipes as its stdin, stdout and
//     stderr, untouched, and stays as pid 1 of the namespace: it forwards
//     SIGTERM, SIGINT and SIGHUP (ignoring the other signals), reaps
//     orphans, and exits with the runtime's
//     status. When it exits, the kernel kills whatever is left in the pid
//     namespace, so nothing a runtime starts outlives its session.
//
// The helper reports to the gateway on a status pipe: first that the
// sandbox is up (or exactly why it could not be built), last how the
// runtime ended. A sandbox the kernel cannot give is an error, never a
// silent downgrade; only Landlock, a second layer under the mount
// namespace, is applied as far as the kernel's ABI goes.
//
// When the gateway runs as root its runtimes do not: the user namespace
// maps the sandbox's root to an unprivileged uid of the agent's own
// (AgentUID), which owns the agent's writable paths. Otherwise it maps to
// the gateway's uid, with no capability left after the setup.
//
// # Using it
//
// A program that starts sandboxes must call Init first thing in main
// (and test binaries in TestMain): in the re-executed helper, Init runs
// the helper and never returns.
package sandbox
