package agents

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/netpolicy"
)

// The tools that gate protocol rights. Other tool names are passed to the
// runtime untouched.
const (
	ToolQuery   = "BCPQuery"   // a Controller may send bcp_query_request
	ToolRespond = "BCPRespond" // a Reader may answer queries
	ToolPublish = "BCPPublish" // a Reader may publish to subscriptions
	// ToolSubscribe lets a Controller ask at run time for a subscription
	// of its own (bcp_subscribe_request); it exists only once an operator
	// approves it (see Set.WithSubscriptions).
	ToolSubscribe = "BCPSubscribe"
)

// DefaultIdleTimeout applies when a definition sets no idle_timeout.
const DefaultIdleTimeout = 10 * time.Minute

// Role is an agent's side of a channel.
type Role string

// The roles.
const (
	RoleController Role = "controller"
	RoleReader     Role = "reader"
)

// Opposite returns the role the peer must hold.
func (r Role) Opposite() Role {
	if r == RoleController {
		return RoleReader
	}
	return RoleController
}

// Definition is one agent, as its operator wrote it, with defaults applied.
type Definition struct {
	Name        string
	Description string
	File        string // the path it was loaded from
	// Runtime is the argv of the runtime process.
	Runtime []string
	// Workdir is the runtime's working directory, absolute and cleaned (a
	// relative one is resolved against the definition file's directory).
	// Empty when the definition sets none: the gateway then gives the agent
	// a directory of its own under the state directory (DefaultWorkdir),
	// never the definitions folder, which a runtime must not be able to
	// write to.
	Workdir string
	// Env holds the only variables the runtime gets besides PATH, HOME, LANG
	// and BCPGW_AGENT. Values are kept as written; ${VAR} is expanded when
	// the runtime starts.
	Env           map[string]string
	Model         string
	Tools         []string
	MaxTurns      int
	IdleTimeout   time.Duration // 0 means never
	Autostart     bool
	Channels      []*Channel
	CronSchedules []CronSchedule
	// SystemPrompt is the Markdown body after the frontmatter.
	SystemPrompt string
	// Sandbox is how the runtime is contained (PROTOCOL.md section 8).
	// Without a sandbox key: sandboxed, no extra paths, network none.
	Sandbox Sandbox
	// Dialect is how the agent's runtime reads what the gateway sends it
	// (runtime_dialect); empty means DialectBCPGW.
	Dialect Dialect
	// FloodLimit bounds the lines its runtime may write (flood_limit);
	// zero fields leave the gateway's defaults in force.
	FloodLimit FloodLimit
	// TurnTimeout bounds one turn (turn_timeout): a runtime that has not
	// answered result within it is stopped, restarted, and its delivery
	// sent to the next session. 0 when the definition sets none: the
	// gateway's default applies (bcpgw run --turn-timeout).
	TurnTimeout time.Duration

	lines  lineIndex
	broken bool // loaded with errors; its peers skip the mirror checks
	// byPeer indexes Channels by peer (the first of a peer's, if it has
	// two), set by Load: a hub may have thousands of channels, and the
	// load looks up each of its peers' mirrors. Nil: Channel scans.
	byPeer map[string]*Channel
	// controls and reads say whether d holds a controller or a reader
	// channel, set with byPeer: the path rules ask it of every pair of
	// agents.
	controls, reads bool
	// readOnlyAt and readWriteAt are the field paths of Sandbox.ReadOnly
	// and Sandbox.ReadWrite, item by item, for the load-time path rules
	// (a refused item leaves a gap in the lists, not in the numbering).
	readOnlyAt, readWriteAt []string
}

// Equal reports whether d and o define the same agent: every field an
// operator wrote, whatever file or line it came from. Reload uses it to
// tell changed definitions from untouched ones.
func (d *Definition) Equal(o *Definition) bool {
	if d == nil || o == nil {
		return d == o
	}
	a, errA := d.fingerprint()
	b, errB := o.fingerprint()
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// fingerprint encodes the exported fields but File: JSON skips the
// unexported ones (line numbers, error paths) and sorts map keys.
func (d *Definition) fingerprint() ([]byte, error) {
	c := *d
	c.File = ""
	// Absent and empty are the same to the gateway (env: {} or tools: []).
	if len(c.Env) == 0 {
		c.Env = nil
	}
	if len(c.Tools) == 0 {
		c.Tools = nil
	}
	if len(c.Channels) == 0 {
		c.Channels = nil
	}
	if len(c.CronSchedules) == 0 {
		c.CronSchedules = nil
	}
	if c.Dialect == DialectBCPGW {
		c.Dialect = ""
	}
	// netpolicy.Destination holds a netip.Addr, which encodes as its
	// canonical text (MarshalText), so equal lists encode equally.
	if len(c.Sandbox.ReadOnly) == 0 {
		c.Sandbox.ReadOnly = nil
	}
	if len(c.Sandbox.ReadWrite) == 0 {
		c.Sandbox.ReadWrite = nil
	}
	if len(c.Sandbox.Network.Allow) == 0 {
		c.Sandbox.Network.Allow = nil
	}
	return json.Marshal(&c)
}

// Dialect is how a runtime reads the messages the gateway sends it. Both
// dialects get the same messages, with the specs in both spellings; they
// differ only where TriOnyx's runtime reads a field another way.
type Dialect string

// The dialects.
const (
	// DialectBCPGW is the protocol as PROTOCOL.md has it: a Controller
	// matches an answer by the query_id of bcp_query_sent.
	DialectBCPGW Dialect = "bcpgw"
	// DialectTriOnyx is TriOnyx's runtime, which ignores bcp_query_sent
	// and takes its own request_id for the query's id: the
	// bcp_response_delivery and bcp_query_error of a Controller in this
	// dialect carry its request_id as query_id (the gateway's query ids
	// stay the gateway's, and only the Controller that chose a request_id
	// ever sees it), and a Cat-3 answer is delivered as {"response": ...},
	// the key TriOnyx's runtime uses, instead of {"summary": ...}.
	DialectTriOnyx Dialect = "trionyx"
)

// TriOnyx reports whether d's runtime speaks TriOnyx's dialect.
func (d *Definition) TriOnyx() bool { return d != nil && d.Dialect == DialectTriOnyx }

// holds reports whether d has a channel with role r.
func (d *Definition) holds(r Role) bool {
	if d.byPeer != nil {
		switch r {
		case RoleController:
			return d.controls
		case RoleReader:
			return d.reads
		}
	}
	for _, c := range d.Channels {
		if c.Role == r {
			return true
		}
	}
	return false
}

// Warnf is a warning about d at the line of the key path (e.g.
// "runtime"), for a check made outside this package: bcpgw validate's
// look at the machine it runs on.
func (d *Definition) Warnf(path, format string, args ...any) *Warning {
	return d.warnf(path, format, args...)
}

// HasTool reports whether the definition lists tool (case-sensitive).
func (d *Definition) HasTool(tool string) bool { return slices.Contains(d.Tools, tool) }

// Channel returns the definition's channel to peer, or nil.
func (d *Definition) Channel(peer string) *Channel {
	if d.byPeer != nil {
		return d.byPeer[peer]
	}
	for _, c := range d.Channels {
		if c.Peer == peer {
			return c
		}
	}
	return nil
}

// indexChannels builds byPeer from Channels; Load calls it once the
// channels are final.
func (d *Definition) indexChannels() {
	d.byPeer = make(map[string]*Channel, len(d.Channels))
	d.controls, d.reads = false, false
	for _, c := range d.Channels {
		d.controls = d.controls || c.Role == RoleController
		d.reads = d.reads || c.Role == RoleReader
		if _, dup := d.byPeer[c.Peer]; !dup {
			d.byPeer[c.Peer] = c
		}
	}
}

// DefaultWorkdir is the working directory of an agent whose definition
// sets no workdir: a directory of its own under the gateway's state
// directory, so that agents never share one and none works in the
// definitions folder.
func DefaultWorkdir(stateDir, agent string) string {
	return filepath.Join(stateDir, "work", agent)
}

// Sandbox is the containment a definition asks for. Every runtime is
// sandboxed unless None is set; the gateway refuses to start an agent
// whose sandbox the kernel cannot provide.
type Sandbox struct {
	// None is "sandbox: none": the runtime runs with everything its user
	// can reach. bcpgw run refuses such a set unless started with
	// --allow-unsandboxed (see Set.Unsandboxed).
	None bool
	// ReadOnly are extra paths visible read-only inside the sandbox, at
	// the same path. Absolute and cleaned: relative ones are resolved
	// against the definition file's directory, like workdir.
	ReadOnly []string
	// ReadWrite are extra writable paths, resolved like ReadOnly.
	ReadWrite []string
	// Network is what the runtime may reach over the network.
	Network Network
}

// NetworkMode says how a sandboxed runtime reaches the network.
type NetworkMode string

// The network modes.
const (
	NetworkNone  NetworkMode = "none"  // default: no network at all
	NetworkHost  NetworkMode = "host"  // the host's network, loopback included
	NetworkProxy NetworkMode = "proxy" // only Allow, through the gateway's egress proxy
)

// Network is a sandbox's network policy.
type Network struct {
	// Mode is NetworkNone unless the definition says otherwise; read the
	// empty mode of a Definition built in code as NetworkNone too.
	Mode NetworkMode
	// Allow lists the destinations reachable through the egress proxy,
	// in the order written; set only when Mode is NetworkProxy.
	Allow []netpolicy.Destination
}

// Channel is one side of a BCP channel, as one agent declares it.
type Channel struct {
	Peer           string
	Role           Role
	MaxCategory    bcp.Category
	BudgetBits     int64
	MaxCat2Queries int
	MaxCat3Queries int
	Subscriptions  []*Subscription // only when Role is controller
	// Rates limit the channel's queries and pushes per category (TriOnyx
	// definitions, --compat trionyx); nil: no rate limits.
	Rates *Rates
	// Approvals is how the approval items of answers on this channel are
	// decided, and the default of its subscriptions (approvals); set on a
	// controller side only.
	Approvals ApprovalPolicy

	index int  // position in bcp_channels, for error paths
	dup   bool // a second channel to the same peer (an error)
}

// Subscription is a push channel a Controller declares: what a Reader may
// publish to it and how much that costs.
type Subscription struct {
	ID         string
	Controller string
	Reader     string
	Spec       bcp.Spec
	// Bits is what one accepted push is charged, computed once at load.
	Bits float64
	// RateLimit bounds the pushes the gateway accepts on this subscription
	// (rate_limit): at most Limit in any Window; nil: no limit.
	RateLimit *Rate
	// Filter decides which accepted pushes are delivered (filter); nil:
	// every one.
	Filter *Filter
	// Debounce replaces a push not yet delivered by a newer one with the
	// same key value (debounce); Batch holds pushes and delivers them as
	// one (batch). nil: neither. Cat-1 and Cat-2 only (policy.go); the
	// gateway enforces them (gateway/debounce_batch.go).
	Debounce *Debounce
	Batch    *Batch

	// Approvals is how its approval items are decided (approvals), as
	// written: unset fields take the channel's (Link.Approvals).
	Approvals ApprovalPolicy
	// Approved is set on a subscription a Controller asked for at run
	// time (BCPSubscribe) and an operator approved: it is in no
	// definition file, and lives in the gateway's store until revoked.
	Approved bool

	path string // e.g. "bcp_channels[0].subscriptions[1]"
}

// CronSchedule is a prompt sent to the agent on a schedule (standard
// five-field cron syntax, or a descriptor such as @hourly).
type CronSchedule struct {
	Schedule string
	Message  string
	Label    string
}

// lineIndex maps a field path to the line that holds it.
type lineIndex map[string]int

// line returns the line of path, or of its nearest recorded parent.
func (li lineIndex) line(path string) int {
	for {
		if n, ok := li[path]; ok {
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return li[""]
		}
		path = path[:i]
	}
}
