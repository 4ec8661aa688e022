// Package tui is the terminal approval queue of bcpgw approvals: a
// bubbletea program that is only a client of the control socket. It lists
// the pending approval items, updated by the gateway's event
// notifications, shows each one's full text with anomalies highlighted
// and invisible characters made visible, and approves or rejects it.
//
// The queue may hold more items than anyone reads (100,000 after a long
// weekend), so the list is read a page at a time (approvals.list's
// cursor): the first page at start, the next one as the cursor nears the
// end of what is loaded. Notifications keep what is loaded current
// without reading it again: a decided item is taken off the list, and a
// new one is read from the end of the queue only once everything before
// it is loaded. No answer is larger than a page, and what the queue holds
// is what the reviewer scrolled through.
//
// All I/O happens in tea.Cmd functions that return typed messages; the
// model's state is an explicit view enum.
package tui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/bcpgw/bcpgw/gateway/control"
)

// Conn is what the queue needs of a control connection; *control.Client
// implements it.
type Conn interface {
	ApprovalsPage(ctx context.Context, p control.ApprovalsParams) (control.ApprovalsPage, error)
	Approve(ctx context.Context, id, sha256, note string) (control.Approval, error)
	Reject(ctx context.Context, id, sha256, reason string) (control.Approval, error)
	Subscribe(ctx context.Context, p control.SubscribeParams) (control.SubscribeResult, error)
	Notifications() <-chan control.EventNotification
	Close() error
}

// Dialer connects to the gateway. It is called at start and again after
// the connection is lost.
type Dialer func(ctx context.Context) (Conn, error)

// Config configures the queue.
type Config struct {
	Dial  Dialer
	State string // the state directory, shown in the header
	// Now is the clock for ages and expiries; default time.Now.
	Now func() time.Time
	// Retry is how long to wait before dialling again; default 2s.
	Retry time.Duration
	// Timeout bounds each request; default 10s.
	Timeout time.Duration
}

// view is what the screen shows.
type view int

const (
	viewList    view = iota // the pending items
	viewDetail              // one item's full text
	viewConfirm             // "approve this item? y/n"
	viewReason              // typing a rejection reason
	viewHelp                // the keys, over the list or the detail view (helpFrom)
)

// Model is the queue's bubbletea model.
type Model struct {
	cfg  Config
	keys keyMap
	st   styles

	conn     Conn
	connErr  error // why there is no connection
	loaded   bool  // the first page has arrived
	fetched  int   // fetches started; only the latest one's answer counts
	fetching bool  // a fetch is in flight
	dirty    bool  // an item was queued during it: read the end of the queue again
	// gone are the items decided while a fetch was in flight: its answer
	// may have been read before, and must not bring them back.
	gone map[string]bool

	items []control.Approval // the pending items loaded, oldest first
	// after is the cursor of the next page: every pending item up to it
	// is loaded. more says the gateway had items after it when it last
	// answered; otherwise new items are read from after as they are
	// queued.
	after  int64
	more   bool
	cursor int
	view   view
	open   control.Approval // the item in the detail view

	vp     viewport.Model
	reason textinput.Model
	flash  string // the last outcome, shown above the help line
	failed bool   // flash is an error
	busy   bool   // a decision is in flight

	// seen is how far each item opened was on screen: approving is
	// refused until all of it was (unread).
	seen     map[string]seenState
	helpVP   viewport.Model // the help's text (viewHelp)
	helpFrom view           // the view the help was opened from

	width, height int
}

// New returns the queue's model.
func New(cfg Config) Model {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	ti := textinput.New()
	ti.Prompt = "Reason: "
	ti.Placeholder = "told to the Reader"
	ti.CharLimit = 500
	m := Model{cfg: cfg, keys: defaultKeys(), st: defaultStyles(), reason: ti, width: 80, height: 24, seen: map[string]seenState{}}
	m.vp = viewport.New(80, 16)
	m.helpVP = viewport.New(80, 16)
	return m
}

// seenState is how much of an item has been on screen: the lines up to
// lines of its text as wrapped at width columns, or all of it.
type seenState struct {
	width, lines int
	all          bool
}

// Messages from commands.
type (
	connectedMsg  struct{ conn Conn }
	dialFailedMsg struct{ err error }
	lostMsg       struct {
		conn Conn
		err  error
	}
	itemsMsg struct {
		conn    Conn
		gen     int  // which fetch; an older one's answer is dropped
		replace bool // the items replace the list (a reload) instead of adding to it
		items   []control.Approval
		after   int64 // the cursor after these items
		more    bool  // items follow it
		err     error
	}
	noticeMsg struct {
		conn Conn
		ev   control.Event
	}
	decidedMsg struct {
		approve bool
		item    control.Approval
		err     error
	}
	// updatedMsg is an item read again after an approval of it that did
	// not release it (approval_partial).
	updatedMsg struct {
		conn Conn
		item control.Approval
	}
	redialMsg struct{}
	tickMsg   time.Time
)

// Init dials the gateway and starts the clock that ages the items.
func (m Model) Init() tea.Cmd {
	return tea.Batch(m.dial(), tick())
}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// dial connects and subscribes to approval events before the first list,
// so that nothing decided in between is missed.
func (m Model) dial() tea.Cmd {
	cfg := m.cfg
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
		defer cancel()
		conn, err := cfg.Dial(ctx)
		if err != nil {
			return dialFailedMsg{err}
		}
		if _, err := conn.Subscribe(ctx, control.SubscribeParams{Types: []string{"approval_*"}}); err != nil {
			conn.Close()
			return dialFailedMsg{err}
		}
		return connectedMsg{conn}
	}
}

// pageSize is how many items one fetch asks for; prefetch is how close
// to the last item loaded the cursor may come before the next page is
// fetched, so that scrolling does not wait for it.
const (
	pageSize = control.DefaultApprovalsPage
	prefetch = 20
)

// reload reads the pending items from the start of the queue again, as
// far as the list reached (after), at least a page: on (re)connecting,
// when notifications may have been missed. The reviewer keeps their
// place.
func (m *Model) reload() tea.Cmd {
	m.fetching, m.dirty, m.gone = true, false, map[string]bool{}
	m.fetched++
	conn, timeout, gen, until := m.conn, m.cfg.Timeout, m.fetched, m.after
	return func() tea.Msg {
		msg := itemsMsg{conn: conn, gen: gen, replace: true, items: []control.Approval{}}
		for {
			page, err := readPage(conn, timeout, msg.after)
			if err != nil {
				msg.err = err
				return msg
			}
			msg.items = append(msg.items, page.Items...)
			msg.after, msg.more = pageEnd(page, msg.after)
			if !msg.more || msg.after >= until {
				return msg
			}
		}
	}
}

// fetchMore reads the page after the last item loaded: the next page as
// the cursor nears the end of the list, or new items at the end of the
// queue. At most one fetch is in flight; items queued meanwhile mark the
// list dirty, and one more fetch follows, so a burst of items costs two
// fetches, not one each.
func (m *Model) fetchMore() tea.Cmd {
	if m.fetching {
		m.dirty = true
		return nil
	}
	m.fetching, m.dirty, m.gone = true, false, map[string]bool{}
	m.fetched++
	conn, timeout, gen, after := m.conn, m.cfg.Timeout, m.fetched, m.after
	return func() tea.Msg {
		page, err := readPage(conn, timeout, after)
		msg := itemsMsg{conn: conn, gen: gen, items: page.Items, err: err}
		msg.after, msg.more = pageEnd(page, after)
		return msg
	}
}

func readPage(conn Conn, timeout time.Duration, after int64) (control.ApprovalsPage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return conn.ApprovalsPage(ctx, control.ApprovalsParams{Status: "pending", Limit: pageSize, Cursor: after})
}

// pageEnd is the cursor after page, read from cursor after, and whether
// more items follow it.
func pageEnd(page control.ApprovalsPage, after int64) (int64, bool) {
	if page.Next != 0 {
		return page.Next, true
	}
	for _, a := range page.Items {
		after = max(after, a.Seq)
	}
	return after, false
}

// wantMore fetches the next page if the cursor is near the end of what is
// loaded and more items follow.
func (m *Model) wantMore() tea.Cmd {
	if m.conn == nil || !m.more || m.cursor < len(m.items)-prefetch {
		return nil
	}
	return m.fetchMore()
}

// listen waits for the next notification; the channel closes when the
// connection ends.
func listen(conn Conn) tea.Cmd {
	return func() tea.Msg {
		n, ok := <-conn.Notifications()
		if !ok {
			return lostMsg{conn: conn, err: errors.New("the gateway closed the connection")}
		}
		return noticeMsg{conn: conn, ev: n.Event}
	}
}

func (m Model) decide(approve bool, item control.Approval, reason string) tea.Cmd {
	conn, timeout := m.conn, m.cfg.Timeout
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var a control.Approval
		var err error
		if approve {
			a, err = conn.Approve(ctx, item.ID, item.SHA256, "")
		} else {
			a, err = conn.Reject(ctx, item.ID, item.SHA256, reason)
		}
		if err == nil {
			item = a
		}
		return decidedMsg{approve: approve, item: item, err: err}
	}
}

// Update handles a message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
		return m, nil
	case tickMsg:
		return m, tick()
	case connectedMsg:
		m.conn, m.connErr = msg.conn, nil
		fetch := m.reload() // before m is copied out: fetch counts
		return m, tea.Batch(fetch, listen(msg.conn))
	case dialFailedMsg:
		m.connErr = msg.err
		return m, m.redial()
	case redialMsg:
		return m, m.dial()
	case lostMsg:
		if msg.conn != m.conn {
			return m, nil
		}
		return m.lost(msg.err)
	case itemsMsg:
		if msg.conn != m.conn || msg.gen != m.fetched {
			return m, nil // from a connection or fetch since replaced
		}
		m.fetching = false
		if msg.err != nil {
			return m.lost(msg.err)
		}
		items := slices.DeleteFunc(msg.items, func(a control.Approval) bool { return m.gone[a.ID] })
		m.gone = nil
		if msg.replace {
			m.setItems(items)
		} else {
			m.addItems(items)
		}
		m.after, m.more = msg.after, msg.more
		if m.dirty && !m.more {
			fetch := m.fetchMore()
			return m, fetch
		}
		fetch := m.wantMore()
		return m, fetch
	case noticeMsg:
		if msg.conn != m.conn {
			return m, nil
		}
		return m.notice(msg.ev)
	case decidedMsg:
		return m.decided(msg)
	case updatedMsg:
		if msg.conn == m.conn {
			m.update(msg.item)
		}
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

// notice applies an approval event to the list: a decided item leaves it
// at once; a new one is read from the end of the queue, unless items
// before it are still to be loaded (it comes with them).
func (m Model) notice(ev control.Event) (tea.Model, tea.Cmd) {
	next := listen(m.conn)
	switch ev.Kind {
	case "approval_approved", "approval_rejected", "approval_expired", "approval_dropped":
		if m.fetching {
			m.gone[ev.Ref] = true
		}
		m.decidedElsewhere(ev.Ref)
		fetch := m.wantMore() // the list may have shrunk to near the cursor
		return m, tea.Batch(fetch, next)
	case "approval_queued":
		if m.more {
			return m, next
		}
		fetch := m.fetchMore()
		return m, tea.Batch(fetch, next)
	case "approval_partial":
		// Approved by one operator, still waiting for others: its count
		// changed.
		return m, tea.Batch(m.readItem(ev.Ref), next)
	}
	return m, next
}

// readItem reads one listed item again: the page of one that starts
// where it does in the queue. Nothing when it is not listed (not loaded
// yet: it comes with its page).
func (m Model) readItem(id string) tea.Cmd {
	i := m.indexOf(id)
	if i < 0 || m.conn == nil {
		return nil
	}
	conn, timeout, seq := m.conn, m.cfg.Timeout, m.items[i].Seq
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		page, err := conn.ApprovalsPage(ctx, control.ApprovalsParams{Status: "pending", Limit: 1, Cursor: seq - 1})
		if err != nil || len(page.Items) == 0 || page.Items[0].ID != id {
			return nil // decided meanwhile (its own event says so), or the connection failed (noticed elsewhere)
		}
		return updatedMsg{conn: conn, item: page.Items[0]}
	}
}

// update replaces a listed item, and the open one, with a newer reading
// of it; an item no longer listed (decided meanwhile) stays off the list.
func (m *Model) update(a control.Approval) {
	if i := m.indexOf(a.ID); i >= 0 {
		m.items[i] = a
	}
	if m.reading() && m.open.ID == a.ID {
		m.open = a
	}
}

func (m Model) redial() tea.Cmd {
	return tea.Tick(m.cfg.Retry, func(time.Time) tea.Msg { return redialMsg{} })
}

// lost drops the connection and schedules a new one. What is on screen
// stays, marked as not live, so the reviewer does not lose their place.
func (m Model) lost(err error) (tea.Model, tea.Cmd) {
	if m.conn != nil {
		m.conn.Close()
	}
	m.conn, m.connErr, m.busy, m.fetching, m.dirty, m.gone = nil, err, false, false, false, nil
	if m.view == viewConfirm || m.view == viewReason {
		m.view = viewDetail
		m.reason.Blur()
	}
	return m, m.redial()
}

// setItems replaces the list, keeping the cursor on the same item if it
// is still pending, and leaves the detail view if its item was decided
// elsewhere.
func (m *Model) setItems(items []control.Approval) {
	sort.SliceStable(items, func(i, j int) bool { return items[i].CreatedAt.Before(items[j].CreatedAt) })
	var at string
	if m.cursor < len(m.items) {
		at = m.items[m.cursor].ID
	}
	m.items, m.loaded = items, true
	m.cursor = min(m.cursor, max(len(items)-1, 0))
	for i, it := range items {
		if it.ID == at {
			m.cursor = i
		}
	}
	m.leaveIfGone()
}

// addItems adds a page to the list (without the items it has already),
// keeping the cursor on the same item.
func (m *Model) addItems(page []control.Approval) {
	have := make(map[string]bool, len(m.items))
	for _, a := range m.items {
		have[a.ID] = true
	}
	items := slices.Clone(m.items)
	for _, a := range page {
		if !have[a.ID] {
			items = append(items, a)
		}
	}
	m.setItems(items)
}

// decidedElsewhere takes an item decided elsewhere, or expired, off the
// list.
func (m *Model) decidedElsewhere(id string) {
	m.remove(id)
	m.leaveIfGone()
}

// leaveIfGone leaves the detail view if its item is no longer listed,
// saying so, unless a decision of this reviewer's is in flight (its
// outcome says what happened).
func (m *Model) leaveIfGone() {
	if m.reading() && !m.busy && m.indexOf(m.open.ID) < 0 {
		if m.view == viewHelp {
			m.helpFrom = viewList // the help stays open, over the list
		} else {
			m.view = viewList
		}
		m.reason.Blur()
		m.say(fmt.Sprintf("%s is no longer pending: it was decided elsewhere or expired.", m.open.ID), true)
	}
}

// reading reports whether an item is open: in the detail view, deciding
// it, or with the help over it.
func (m Model) reading() bool {
	switch m.view {
	case viewList:
		return false
	case viewHelp:
		return m.helpFrom != viewList
	}
	return true
}

// remove takes a decided item off the list at once, before the refetch
// confirms it, keeping the cursor in range.
func (m *Model) remove(id string) {
	if i := m.indexOf(id); i >= 0 {
		m.items = append(m.items[:i:i], m.items[i+1:]...)
		m.cursor = min(m.cursor, max(len(m.items)-1, 0))
	}
	delete(m.seen, id)
}

func (m Model) indexOf(id string) int {
	for i, it := range m.items {
		if it.ID == id {
			return i
		}
	}
	return -1
}

func (m Model) decided(msg decidedMsg) (tea.Model, tea.Cmd) {
	m.busy = false
	if msg.err != nil {
		m.say(fmt.Sprintf("%s: %s", msg.item.ID, errorText(msg.err)), true)
		m.view = viewDetail
		switch control.CodeOf(msg.err) {
		case control.CodeAlreadyDecided, control.CodeExpired, control.CodeRevoked, control.CodeNotFound:
			// The item is no longer pending: back to the list, keeping
			// the gateway's account of what happened to it.
			m.view = viewList
			m.remove(msg.item.ID)
		}
		m.leaveIfGone() // decided elsewhere meanwhile: its notification took it off
		if m.conn == nil {
			return m, nil
		}
		// What is on screen may be stale: read it again (as far as it
		// reached; decisions rarely fail).
		fetch := m.reload()
		return m, fetch
	}
	if msg.approve && msg.item.Status == "pending" {
		// Counted, not released: it needs other operators' approvals.
		m.say(fmt.Sprintf("Approved %s: %s, waits for another operator.", msg.item.ID, msg.item.Progress()), false)
		m.view = viewList
		m.update(msg.item)
		return m, nil
	}
	verb := "Approved"
	if !msg.approve {
		verb = "Rejected"
	}
	m.say(fmt.Sprintf("%s %s (Cat-%d from %s to %s).", verb, msg.item.ID, msg.item.Category, msg.item.Reader, msg.item.Controller), false)
	m.view = viewList
	m.remove(msg.item.ID)
	fetch := m.wantMore()
	return m, fetch
}

func errorText(err error) string {
	var e *control.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func (m *Model) say(s string, failed bool) { m.flash, m.failed = s, failed }

func (m Model) key(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	if key.Matches(msg, m.keys.ForceQuit) {
		return m, tea.Quit
	}
	if m.busy {
		return m, nil // a decision is in flight: nothing may send a second one
	}
	switch m.view {
	case viewReason:
		switch {
		case key.Matches(msg, m.keys.Cancel):
			m.view = viewDetail
			m.reason.Blur()
			return m, nil
		case key.Matches(msg, m.keys.Submit):
			reason := strings.TrimSpace(m.reason.Value())
			if reason == "" {
				m.say("A reason is required: the Reader is told it.", true)
				return m, nil
			}
			if m.conn == nil {
				m.say("Not connected to the gateway; try again when it is back.", true)
				return m, nil
			}
			m.reason.Blur()
			m.busy, m.view = true, viewDetail
			m.say("Rejecting "+m.open.ID+"…", false)
			return m, m.decide(false, m.open, reason)
		}
		var cmd tea.Cmd
		m.reason, cmd = m.reason.Update(msg)
		return m, cmd
	case viewConfirm:
		switch {
		case key.Matches(msg, m.keys.Yes):
			if m.conn == nil {
				m.view = viewDetail
				m.say("Not connected to the gateway; try again when it is back.", true)
				return m, nil
			}
			m.busy, m.view = true, viewDetail
			m.say("Approving "+m.open.ID+"…", false)
			return m, m.decide(true, m.open, "")
		default:
			m.view = viewDetail
			m.say("Not approved.", false)
			return m, nil
		}
	}
	if m.view == viewHelp {
		switch {
		case key.Matches(msg, m.keys.Help), key.Matches(msg, m.keys.Cancel), key.Matches(msg, m.keys.Quit):
			m.view = m.helpFrom
			return m, nil
		}
		var cmd tea.Cmd
		m.helpVP, cmd = m.helpVP.Update(msg)
		return m, cmd
	}
	if key.Matches(msg, m.keys.Quit) {
		return m, tea.Quit
	}
	if key.Matches(msg, m.keys.Help) {
		m.helpFrom, m.view = m.view, viewHelp
		m.layout()
		m.helpVP.GotoTop()
		return m, nil
	}
	if m.view == viewList {
		switch {
		case key.Matches(msg, m.keys.Up):
			m.cursor = max(m.cursor-1, 0)
		case key.Matches(msg, m.keys.Down):
			m.cursor = min(m.cursor+1, max(len(m.items)-1, 0))
			fetch := m.wantMore()
			return m, fetch
		case key.Matches(msg, m.keys.Open):
			if m.cursor < len(m.items) {
				m.openItem(m.items[m.cursor])
			}
		}
		return m, nil
	}
	// viewDetail
	switch {
	case key.Matches(msg, m.keys.Back):
		m.view = viewList
		return m, nil
	case key.Matches(msg, m.keys.Approve):
		// Only what was read may be approved: every line of the item
		// must have been on screen, however small the terminal.
		if n := m.unread(); n > 0 {
			m.say(fmt.Sprintf("Scroll to the end before approving: %d lines below were not on screen yet (↓/j, pgdn, space).", n), true)
			return m, nil
		}
		m.view = viewConfirm
		m.flash = ""
		return m, nil
	case key.Matches(msg, m.keys.Reject):
		m.view = viewReason
		m.flash = ""
		m.reason.SetValue("")
		return m, m.reason.Focus()
	case key.Matches(msg, m.keys.Next), key.Matches(msg, m.keys.Prev):
		i := m.indexOf(m.open.ID)
		if key.Matches(msg, m.keys.Next) {
			i++
		} else {
			i--
		}
		if i >= 0 && i < len(m.items) {
			m.cursor = i
			m.openItem(m.items[i])
		}
		fetch := m.wantMore()
		return m, fetch
	}
	var cmd tea.Cmd
	at := m.vp.YOffset
	m.vp, cmd = m.vp.Update(msg)
	if m.vp.YOffset != at {
		m.flash = "" // said of what was on screen before
	}
	m.markSeen()
	return m, cmd
}

func (m *Model) openItem(a control.Approval) {
	m.open, m.view, m.flash = a, viewDetail, ""
	m.layout()
	m.vp.SetContent(strings.Join(m.detailLines(a), "\n"))
	m.vp.GotoTop()
	m.markSeen()
}

// markSeen records how far the open item has been on screen. Its text is
// wrapped to the terminal's width, so lines seen at another width count
// only once all of the item was seen.
func (m *Model) markSeen() {
	if !m.reading() {
		return
	}
	s := m.seen[m.open.ID]
	if s.width != m.width {
		s.width, s.lines = m.width, 0
	}
	total := m.vp.TotalLineCount()
	s.lines = max(s.lines, min(m.vp.YOffset+m.vp.Height, total))
	s.all = s.all || s.lines >= total
	m.seen[m.open.ID] = s
}

// unread is how many lines of the open item have not been on screen yet
// (0 once all of it was).
func (m Model) unread() int {
	s := m.seen[m.open.ID]
	if s.all {
		return 0
	}
	return max(m.vp.TotalLineCount()-s.lines, 0)
}

// below is how many lines of the open item are below the screen.
func (m Model) below() int {
	return max(m.vp.TotalLineCount()-m.vp.YOffset-m.vp.Height, 0)
}

// layout sizes the viewports: the header takes 3 lines, the item's
// header 2 (the help's title 1) and the footer 2.
func (m *Model) layout() {
	m.vp.Width = m.width
	m.vp.Height = max(m.height-7, 3)
	m.helpVP.Width = m.width
	m.helpVP.Height = max(m.height-6, 3)
	m.reason.Width = max(m.width-len(m.reason.Prompt)-2, 10)
	if m.reading() {
		m.vp.SetContent(strings.Join(m.detailLines(m.open), "\n"))
		m.markSeen()
	}
	if m.view == viewHelp {
		m.helpVP.SetContent(strings.Join(m.helpLines(), "\n"))
	}
}

// detailLines renders an item's directive, anomalies and text.
func (m Model) detailLines(a control.Approval) []string {
	w := max(m.width-2, 20)
	var out []string
	section := func(title string) {
		out = append(out, "")
		for _, l := range wrap(title, nil, w, m.st) {
			out = append(out, m.st.title.Render(l))
		}
	}
	if a.Kind == control.KindSubscription {
		return m.requestLines(a, w)
	}
	if a.Directive != "" {
		section("Directive (what the Controller asked for)")
		out = append(out, indent(wrap(a.Directive, nil, w-2, m.st))...)
	}
	var matches []string
	for _, an := range a.Anomalies {
		matches = append(matches, an.Match)
	}
	if len(a.Anomalies) > 0 {
		section(fmt.Sprintf("Anomalies (%d, highlighted below)", len(a.Anomalies)))
		for _, an := range a.Anomalies {
			out = append(out, indent(wrap(fmt.Sprintf("%s in %s: %q", an.Code, an.Field, an.Match), nil, w-2, m.st))...)
		}
	}
	fields := responseFields(a.Response)
	for _, f := range fields {
		title := f.name
		if n := Unusual(f.text); n > 0 {
			title += fmt.Sprintf(" (%d invisible or unusual characters shown as ⟨U+XXXX⟩)", n)
		}
		section(title)
		out = append(out, indent(wrap(f.text, matches, w-2, m.st))...)
	}
	section("Hash")
	out = append(out, indent(wrap("sha256 "+a.SHA256, nil, w-2, m.st))...)
	return out
}

func indent(lines []string) []string {
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return lines
}

type field struct{ name, text string }

// responseFields lists a response's fields in their order: a Cat-3
// summary, or a Cat-2 item's answers. Values that are not strings are
// shown as JSON.
func responseFields(raw json.RawMessage) []field {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return []field{{"response", string(raw)}}
	}
	var out []field
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		var v json.RawMessage
		if err != nil || !ok || dec.Decode(&v) != nil {
			return []field{{"response", string(raw)}}
		}
		text := string(v) // numbers, booleans, null: as JSON
		if len(v) > 0 && v[0] == '"' {
			_ = json.Unmarshal(v, &text)
		}
		out = append(out, field{name, text})
	}
	return out
}
