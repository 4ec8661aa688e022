package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/gateway/control"
)

// Event text can come from a hostile runtime (its stderr, in a crash
// detail): printed as a line, it must not carry escape sequences.
func TestFormatEventNeutralizesTerminalControls(t *testing.T) {
	e := control.Event{Seq: 7, Time: time.Unix(0, 0), Kind: "session_crashed", Agent: "reader",
		Detail: "exit 1: \x1b]52;c;aGk=\a\x1b[2Jline two\nzero\u200bwidth"}
	got := formatEvent(e)
	if strings.ContainsAny(got, "\x1b\a\n\u200b") {
		t.Fatalf("formatEvent left control characters in: %q", got)
	}
	for _, want := range []string{"⟨U+001B⟩]52;c;aGk=⟨U+0007⟩", "[2Jline two⟨U+000A⟩zero⟨U+200B⟩width", "7 ", "session_crashed reader"} {
		if !strings.Contains(got, want) {
			t.Errorf("formatEvent = %q, want it to contain %q", got, want)
		}
	}
	note := agentNote(control.Agent{State: "failed", LastError: "boom\x1b[31m"})
	if strings.Contains(note, "\x1b") || !strings.Contains(note, "⟨U+001B⟩") {
		t.Errorf("agentNote = %q: the escape must be made visible", note)
	}
}

// A failed agent's note says when it is tried again, in local time.
func TestAgentNoteSaysWhenAFailedAgentIsRetried(t *testing.T) {
	at := time.Date(2026, 11, 21, 14, 5, 30, 0, time.Local)
	note := agentNote(control.Agent{State: "failed", RetryAt: at, LastError: "boom"})
	if !strings.Contains(note, "retrying at 14:05") || !strings.Contains(note, "last error: boom") {
		t.Errorf("agentNote = %q, want when it is retried and why it failed", note)
	}
	if note := agentNote(control.Agent{State: "running"}); strings.Contains(note, "retrying") {
		t.Errorf("agentNote of a running agent = %q", note)
	}
}
