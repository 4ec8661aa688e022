// Package quietterm keeps a program that links Bubble Tea from querying
// its terminal unless it means to run an interactive screen.
//
// Bubble Tea's init asks Lip Gloss whether the terminal's background is
// dark, and termenv answers by writing two queries to stdout (OSC 11, the
// background colour, and a cursor position report) and waiting up to 5
// seconds for the reply. Every command of a binary that links Bubble Tea
// would pay that at start, and where the terminal never answers (a
// terminal without OSC 11, a slow remote link) stall for 5 seconds.
//
// Importing this package settles the question before Bubble Tea's init
// asks it: Go initializes, among the packages whose imports are all
// initialized, the one whose import path sorts first (the spec's
// "Package initialization", Go 1.21 on). This package imports Lip Gloss
// and nothing that imports Bubble Tea, and its path sorts before
// github.com/charmbracelet/..., so its init runs after Lip Gloss's and
// before Bubble Tea's. Keep it that way: it must not import anything
// that depends on Bubble Tea.
package quietterm

import (
	"os"

	"github.com/charmbracelet/lipgloss"
)

func init() {
	// What termenv assumes when a terminal does not answer: dark.
	lipgloss.SetHasDarkBackground(true)
}

// Interactive gives Lip Gloss back its terminal detection, for a program
// about to take over the terminal on stdout: the query, if any, is made
// now, before the program reads the terminal's input (Bubble Tea's own
// reason for querying at init). Call it only for an interactive screen,
// and before the screen's styles are made.
func Interactive() {
	r := lipgloss.NewRenderer(os.Stdout)
	_ = r.HasDarkBackground()
	lipgloss.SetDefaultRenderer(r)
}
