package tui

import "github.com/charmbracelet/bubbles/key"

// keyMap is the queue's one keymap; the help line is built from it.
type keyMap struct {
	Up, Down, Open, Back, Next, Prev key.Binding
	Approve, Reject, Yes, Submit     key.Binding
	Cancel, Quit, ForceQuit          key.Binding
	Help                             key.Binding
	// Scroll and CloseHelp only name keys in the help line: the
	// viewport's own keymap scrolls, and Help, Cancel or Quit close the
	// help.
	Scroll, CloseHelp key.Binding
}

func defaultKeys() keyMap {
	return keyMap{
		Up:        key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
		Down:      key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
		Open:      key.NewBinding(key.WithKeys("enter", "right", "l"), key.WithHelp("enter", "read")),
		Back:      key.NewBinding(key.WithKeys("esc", "left", "h", "backspace"), key.WithHelp("esc", "list")),
		Next:      key.NewBinding(key.WithKeys("n"), key.WithHelp("n/p", "next/prev")),
		Prev:      key.NewBinding(key.WithKeys("p")),
		Approve:   key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "approve")),
		Reject:    key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "reject")),
		Yes:       key.NewBinding(key.WithKeys("y", "Y"), key.WithHelp("y", "yes")),
		Submit:    key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "reject")),
		Cancel:    key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),
		Quit:      key.NewBinding(key.WithKeys("q"), key.WithHelp("q", "quit")),
		ForceQuit: key.NewBinding(key.WithKeys("ctrl+c")),
		Help:      key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Scroll:    key.NewBinding(key.WithHelp("↑/↓", "scroll")),
		CloseHelp: key.NewBinding(key.WithHelp("?/esc/q", "close")),
	}
}
