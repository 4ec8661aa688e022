package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// TestSessionTriOnyxRuntime: a request TriOnyx's runtime makes of its own
// gateway is answered with an error saying bcpgw does not support it, and
// with the reply the runtime waits for, and is audited; a result with the
// token counts at the top level is read like usage{}.
func TestSessionTriOnyxRuntime(t *testing.T) {
	h := newHarness(t, "trionyx")
	s := h.start(t)
	// Two turns: the second prompt reaches the runtime after every reply
	// to the first turn's lines, so the runtime's log is complete.
	for _, p := range []string{"go", "again"} {
		if err := s.Prompt(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if !testproc.CheckFor(10*time.Second, 10*time.Millisecond, func() bool { return len(h.audit.find("turn_done", "")) == 2 }) {
		t.Fatalf("no turn_done; logs:\n%s", h.logs)
	}
	refused := h.audit.find("refused", string(bcp.ProtocolError))
	if len(refused) != 4 {
		t.Fatalf("refusals = %+v, want 4", refused)
	}
	for i, typ := range []string{"send_message_request", "restart_agent_request"} {
		if want := "protocol_error: " + typ + " is not supported by bcpgw: "; !strings.HasPrefix(refused[i].Detail, want) || len(refused[i].Payload) == 0 {
			t.Errorf("refusal %d = %+v, want detail %q and the payload", i, refused[i], want)
		}
	}
	logs := h.logs.String()
	for _, want := range []string{
		`got {"type":"error","message":"protocol_error: send_message_request is not supported by bcpgw: agents exchange data only through BCP queries and subscriptions"}`,
		`got {"type":"send_message_response","request_id":"m-1","success":false,"detail":"protocol_error: send_message_request is not supported by bcpgw: `,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the runtime did not get %s\nlogs:\n%s", want, logs)
		}
	}
	if !strings.Contains(logs, `got {"type":"error","message":"protocol_error: restart_agent_request is not supported by bcpgw: only an operator restarts agents (bcpgw agents stop/start NAME)"}`) {
		t.Errorf("no error for restart_agent_request; logs:\n%s", logs)
	}
	if strings.Contains(logs, "restart_agent_response") {
		t.Error("a reply was sent for a request_id that is not a valid id")
	}
	done := h.audit.find("turn_done", "")[0]
	if want := "prompt done: 3 model turns, 1500 ms, $0.0125, tokens 120 in, 30 out (cache: 7 written, 900 read)"; done.Detail != want {
		t.Errorf("turn_done detail = %q, want %q", done.Detail, want)
	}
}
