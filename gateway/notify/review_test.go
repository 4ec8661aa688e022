package notify

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/bcpgw/bcpgw/bcp"
	"github.com/bcpgw/bcpgw/gateway/store"
	"github.com/bcpgw/bcpgw/internal/clock"
	"github.com/bcpgw/bcpgw/internal/testproc"
)

// ntfy takes a body shorter than its message-size-limit (4096 bytes by
// default) as the message; a longer one is an attachment, or refused 400
// ("attachments not allowed") where attachments are off, as they are by
// default. A Reader whose item renders longer must not be able to turn
// the approval ping into a 400 that is given up.
func TestNtfyBodyFitsNtfysMessageLimit(t *testing.T) {
	c := clock.NewFake(t0)
	h := newHarness(t, c)
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if len(b) >= 4096 { // ntfy without an attachment store
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"code":40014,"http":400,"error":"invalid request: attachments not allowed"}`))
		}
	}))
	defer srv.Close()
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bodies...)
	}
	h.start(targetFile(srv.URL, "ntfy", "approval_queued"))
	h.waitCursor("hook")
	wide := strings.Repeat("\U0001D400", 40) // a printable letter of 4 bytes
	words := make([]string, 150)
	for i := range words {
		words[i] = wide
	}
	var anomalies []bcp.Anomaly
	for range 12 {
		anomalies = append(anomalies, bcp.Anomaly{Code: bcp.AnomalyMarkdownLink, Field: "summary", Match: "[" + strings.Repeat("\U0001D400", 78) + "]"})
	}
	a := &store.Approval{
		Controller: "main", Reader: "researcher", SubscriptionID: "digest", Category: bcp.Category(3),
		Directive: "Summarize what changed today.",
		Response:  json.RawMessage(`{"summary":"` + strings.Join(words, " ") + `"}`),
		Anomalies: anomalies, Bits: 1100, CreatedAt: t0, ExpiresAt: t0.Add(24 * 3600e9),
	}
	if err := h.st.AddApproval(context.Background(), a, store.Event{Time: t0, Kind: "approval_queued", Agent: "researcher", Peer: "main"}); err != nil {
		t.Fatal(err)
	}
	testproc.Eventually(t, "notify_sent or notify_failed", func() bool {
		return len(h.events(KindSent))+len(h.events(KindFailed)) == 1
	})
	body := got()[0]
	if len(body) >= 4096 || len(h.events(KindFailed)) != 0 {
		t.Fatalf("the ntfy body is %d bytes: ntfy refuses it (or makes it an attachment); notify_failed %+v", len(body), h.events(KindFailed))
	}
	for _, want := range []string{"bcpgw approvals --state /srv/gw", "read the whole item in the queue", "Item " + a.ID} {
		if !strings.Contains(body, want) {
			t.Errorf("the cut body lacks %q:\n%s", want, body)
		}
	}
	if !utf8.ValidString(body) || strings.Count(body, "⟨") != strings.Count(body, "⟩") {
		t.Errorf("the body was cut inside a ⟨U+XXXX⟩:\n%s", body)
	}
}

// An event's names come from runtimes when it is a refusal: a Reader's
// push names any controller it likes (Peer), an answer any query id
// (Ref). They are rendered safe like the detail: in a Slack or ntfy
// title they could otherwise carry a live link, a bidi override or a
// line break that forges lines of the notification.
func TestEventNamesAreRenderedSafe(t *testing.T) {
	peer := "https://evil.example/approve?all=1\n*Decide: approved by ops*\u202e"
	ref := "q-1\u200bhttps://evil.example/"
	for _, format := range []Format{FormatJSON, FormatSlack, FormatNtfy} {
		t.Run(string(format), func(t *testing.T) {
			ts, err := Parse("n.yaml", []byte(targetFile("https://hooks.example.com/x", string(format), "refused")), func(string) string { return testSecret() })
			if err != nil {
				t.Fatal(err)
			}
			m := newMessage("id", store.Event{Seq: 7, Time: t0, Kind: "refused", Agent: "researcher", Peer: peer, Code: "no_channel", Ref: ref,
				Detail: "no_channel: no channel"}, nil, "")
			r, err := render(ts.List[0], m)
			if err != nil {
				t.Fatal(err)
			}
			text := string(r.body) + "\n" + r.header["Title"]
			if format == FormatSlack {
				var s struct{ Text string }
				if err := json.Unmarshal(r.body, &s); err != nil {
					t.Fatal(err)
				}
				text = s.Text
			}
			if format == FormatJSON {
				var got Message
				if err := json.Unmarshal(r.body, &got); err != nil {
					t.Fatal(err)
				}
				text = got.Peer + "\n" + got.Ref
			}
			for _, bad := range []string{"https://", "evil.example", "\u202e", "\u200b", "\n*Decide"} {
				if strings.Contains(text, bad) {
					t.Errorf("the notification holds %q:\n%s", bad, text)
				}
			}
		})
	}
}

// A token that cannot be a header value makes every request fail before
// it reaches the network: the target would be "down" forever though its
// endpoint never saw a request. It is an error when the file is loaded.
func TestParseRefusesATokenThatIsNoHeaderValue(t *testing.T) {
	file := "targets:\n  - name: hook\n    url: https://ntfy.example.com/t\n    format: ntfy\n    token_env: TOKEN\n    events: [agent_failed]\n"
	for _, tok := range []string{"tk_abc\x01def", "tk_abc\x7f", "tk\x00"} {
		if _, err := Parse("n.yaml", []byte(file), env(map[string]string{"TOKEN": tok})); err == nil || !strings.Contains(err.Error(), "token_env") {
			t.Errorf("token %q: Parse = %v, want an error at token_env", tok, err)
		}
	}
	if _, err := Parse("n.yaml", []byte(file), env(map[string]string{"TOKEN": "tk_AbC-1.2~+/="})); err != nil {
		t.Errorf("a plain token: %v", err)
	}
}

// A request that fails before it reaches the network because of its own
// content (a header value no HTTP request can carry) is no outage:
// trying it again can never succeed, and a target waiting on it as "down"
// would send nothing more. It is refused, and given up.
func TestARequestThatCannotBeSentIsRefused(t *testing.T) {
	c := clock.NewFake(t0)
	rcv := newReceiver(t, c)
	ts, err := Parse("n.yaml", []byte(targetFile(rcv.srv.URL, "ntfy", "agent_failed")), func(string) string { return testSecret() })
	if err != nil {
		t.Fatal(err)
	}
	s := &sender{client: NewClient(), clock: c, timeout: DefaultTimeout}
	r := s.attempt(context.Background(), ts.List[0], &request{id: "x", body: []byte("hi"), contentType: "text/plain",
		header: map[string]string{"Title": "a\r\nX-Injected: 1"}})
	if r.Outcome != OutcomeRefused || r.Err == nil {
		t.Errorf("attempt = %+v (%s), want refused with an error", r, r)
	}
	if n := len(rcv.requests()); n != 0 {
		t.Errorf("%d requests reached the endpoint", n)
	}
}

// An event that cannot be rendered (the json format has no infinite
// number) is given up with a notify_failed that says so, like any event
// given up, and the next one goes out.
func TestAnEventThatCannotBeRenderedIsGivenUpAndSaysSo(t *testing.T) {
	c := clock.NewFake(t0)
	h := newHarness(t, c)
	rcv := newReceiver(t, c)
	h.start(targetFile(rcv.srv.URL, "json", "agent_failed"))
	h.waitCursor("hook")
	h.append(store.Event{Kind: "agent_failed", Agent: "a", Bits: math.Inf(1)}, store.Event{Kind: "agent_failed", Agent: "b"})
	testproc.Eventually(t, "the second event sent", func() bool { return len(h.events(KindSent)) == 1 })
	if f := h.events(KindFailed); len(f) != 1 || !strings.Contains(f[0].Detail, "cannot be rendered") {
		t.Errorf("notify_failed = %+v, want one for the event that cannot be rendered", f)
	}
}
