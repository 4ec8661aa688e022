package agents_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

// approvedSet is main controlling researcher (max_category 3 on main's
// side, 2 on researcher's: effective 2; budget_bits 4000 both), with one
// declared subscription "flags", and solo, which has no channel.
func approvedSet(t *testing.T) *agents.Set {
	t.Helper()
	files := pairSet(3, 2, "      - {id: flags, category: 1, fields: [{name: ok, type: boolean}]}\n")
	files["solo.md"] = solo("")
	return mustLoad(t, writeSet(t, files))
}

// asked is a Cat-1 subscription main asks researcher for at run time.
func asked(id string) *agents.Subscription {
	return &agents.Subscription{ID: id, Controller: "main", Reader: "researcher", Spec: bcp.Spec{
		Category: bcp.Cat1,
		Fields:   []bcp.Field{{Name: "topic", Type: bcp.Enum, Values: []string{"a", "b", "c", "d"}}},
	}}
}

func subIDs(subs []*agents.Subscription) []string {
	var out []string
	for _, s := range subs {
		out = append(out, s.Controller+">"+s.Reader+"/"+s.ID)
	}
	return out
}

// TestWithSubscriptionsJoinsACopy: an approved subscription is found by
// Subscription, SubscriptionsFor, the link and main's channel of the set
// returned, with Approved and its bits set; the original set, its
// definitions and links, and the subscription passed in are unchanged.
func TestWithSubscriptionsJoinsACopy(t *testing.T) {
	t.Parallel()
	set := approvedSet(t)
	in := asked("topics")
	if e := set.CheckSubscription(in); e != nil {
		t.Fatalf("CheckSubscription: %v", e)
	}
	out, refused := set.WithSubscriptions([]*agents.Subscription{in})
	if len(refused) != 0 {
		t.Fatalf("refused: %v", refused[0].Err)
	}
	if out == set {
		t.Fatal("WithSubscriptions returned the set itself, want a copy")
	}

	got := out.Subscription("main", "researcher", "topics")
	if got == nil {
		t.Fatal("the copy's Subscription(main, researcher, topics) = nil")
	}
	if got == in || !got.Approved || got.Bits != 2 || got.Spec.Category != bcp.Cat1 || in.Approved || in.Bits != 0 {
		t.Errorf("added %+v (from %+v): want a copy, Approved, 2 bits; the one passed in unchanged", got, in)
	}
	if d := out.Subscription("main", "researcher", "flags"); d == nil || d.Approved {
		t.Errorf("the copy lost the declared subscription flags: %+v", d)
	}
	want := []string{"main>researcher/flags", "main>researcher/topics"}
	if s := subIDs(out.SubscriptionsFor("researcher")); !slices.Equal(s, want) {
		t.Errorf("copy: SubscriptionsFor(researcher) = %v, want %v", s, want)
	}
	if s := subIDs(out.Link("main", "researcher").ControllerSide.Subscriptions); !slices.Equal(s, want) {
		t.Errorf("copy: link's subscriptions = %v, want %v", s, want)
	}
	if s := subIDs(out.Agent("main").Channel("researcher").Subscriptions); !slices.Equal(s, want) {
		t.Errorf("copy: main's channel's subscriptions = %v, want %v", s, want)
	}
	if l := out.Link("main", "researcher"); l.Controller != out.Agent("main") || l.ControllerSide != out.Agent("main").Channel("researcher") {
		t.Error("copy: the link does not point at the copied main and its channel")
	}
	if out.Agent("researcher") != set.Agent("researcher") || out.Agent("solo") != set.Agent("solo") {
		t.Error("copy: definitions that gained nothing are not shared")
	}

	// The original, as it was.
	orig := []string{"main>researcher/flags"}
	if set.Subscription("main", "researcher", "topics") != nil {
		t.Error("original: Subscription(main, researcher, topics) found")
	}
	if s := subIDs(set.SubscriptionsFor("researcher")); !slices.Equal(s, orig) {
		t.Errorf("original: SubscriptionsFor(researcher) = %v, want %v", s, orig)
	}
	if s := subIDs(set.Link("main", "researcher").ControllerSide.Subscriptions); !slices.Equal(s, orig) {
		t.Errorf("original: link's subscriptions = %v, want %v", s, orig)
	}
	if s := subIDs(set.Agent("main").Channel("researcher").Subscriptions); !slices.Equal(s, orig) {
		t.Errorf("original: main's channel's subscriptions = %v, want %v", s, orig)
	}
	if set.Link("main", "researcher").Controller != set.Agent("main") {
		t.Error("original: the link no longer points at the original main")
	}

	// Now taken, in the copy only.
	if e := out.CheckSubscription(asked("topics")); e == nil || e.Code != bcp.ProtocolError || !strings.Contains(e.Detail, "already exists") {
		t.Errorf("copy: CheckSubscription(topics) = %v, want protocol_error: already exists", e)
	}
	if e := set.CheckSubscription(asked("topics")); e != nil {
		t.Errorf("original: CheckSubscription(topics) = %v, want nil", e)
	}
	// Without extra, the set itself.
	if same, r := set.WithSubscriptions(nil); same != set || r != nil {
		t.Errorf("WithSubscriptions(nil) = a new set or refusals %v; want the set itself", r)
	}
}

// TestCheckSubscriptionRefuses: a subscription asked for at run time is
// held to the rules of a declared one, each failure with its code and a
// detail saying why; WithSubscriptions leaves those out (and a second
// one with an id it just added), adding the others.
func TestCheckSubscriptionRefuses(t *testing.T) {
	t.Parallel()
	set := approvedSet(t)
	words := make([]bcp.Question, 20)
	for i := range words {
		words[i] = bcp.Question{ID: "q" + string(rune('a'+i)), Question: "Why?", MaxWords: 50}
	}
	cases := []struct {
		name   string
		sub    *agents.Subscription
		code   bcp.Code
		detail string
	}{
		{"over max_category", func() *agents.Subscription {
			s := asked("digest")
			s.Spec = bcp.Spec{Category: bcp.Cat3, Directive: "Summarize.", MaxWords: 20}
			return s
		}(), bcp.CategoryNotAllowed, "Category 3 is not allowed on the channel to 'researcher' (max_category 2)"},
		{"unknown reader", func() *agents.Subscription { s := asked("topics"); s.Reader = "ghost"; return s }(),
			bcp.NoChannel, "No channel from controller 'main' to reader 'ghost'"},
		{"a reader without a channel", func() *agents.Subscription { s := asked("topics"); s.Reader = "solo"; return s }(),
			bcp.NoChannel, "No channel from controller 'main' to reader 'solo'"},
		{"the wrong way round", func() *agents.Subscription {
			s := asked("topics")
			s.Controller, s.Reader = "researcher", "main"
			return s
		}(), bcp.NoChannel, "No channel from controller 'researcher' to reader 'main'"},
		{"clashes with a declared id", asked("flags"), bcp.ProtocolError,
			"Subscription 'flags' already exists on the channel from 'main' to 'researcher'"},
		{"bad id", asked("Bad_ID"), bcp.ProtocolError, `subscription id "Bad_ID" must match`},
		{"invalid spec", func() *agents.Subscription { s := asked("empty"); s.Spec.Fields = nil; return s }(),
			bcp.ValidationFailed, "Subscription spec is not valid: "},
		{"over budget", func() *agents.Subscription {
			s := asked("essay")
			s.Spec = bcp.Spec{Category: bcp.Cat2, Questions: words}
			return s
		}(), bcp.BudgetExhausted, "more than the channel's budget_bits 4000: it could never be delivered"},
	}
	var all []*agents.Subscription
	for _, c := range cases {
		e := set.CheckSubscription(c.sub)
		if e == nil || e.Code != c.code || !strings.Contains(e.Detail, c.detail) {
			t.Errorf("%s: CheckSubscription = %v, want %s: %s", c.name, e, c.code, c.detail)
		}
		all = append(all, c.sub)
	}

	// All refused: the set itself, each refusal in order, as CheckSubscription says.
	out, refused := set.WithSubscriptions(all)
	if out != set {
		t.Error("WithSubscriptions of refused subscriptions only returned a copy, want the set itself")
	}
	if len(refused) != len(cases) {
		t.Fatalf("%d refused, want %d", len(refused), len(cases))
	}
	for i, r := range refused {
		if r.Sub != cases[i].sub || r.Err == nil || r.Err.Code != cases[i].code {
			t.Errorf("refused[%d] = %v (%v), want %s: %s", i, r.Sub.ID, r.Err, cases[i].name, cases[i].code)
		}
	}

	// Mixed: the good ones are added, the second "topics" clashes with
	// the first, the others are refused.
	first, second := asked("topics"), asked("topics")
	other := asked("more")
	out, refused = set.WithSubscriptions([]*agents.Subscription{first, cases[0].sub, second, other})
	if out == set {
		t.Fatal("WithSubscriptions added nothing")
	}
	var why []string
	for _, r := range refused {
		why = append(why, r.Sub.ID+": "+r.Err.Error())
	}
	if len(refused) != 2 || refused[0].Sub != cases[0].sub || refused[1].Sub != second ||
		!strings.Contains(refused[1].Err.Detail, "Subscription 'topics' already exists") {
		t.Errorf("refused %q; want digest (category) and the second topics (already exists)", why)
	}
	if s := subIDs(out.SubscriptionsFor("researcher")); !slices.Equal(s, []string{"main>researcher/flags", "main>researcher/topics", "main>researcher/more"}) {
		t.Errorf("copy: SubscriptionsFor(researcher) = %v, want flags, topics, more", s)
	}
	if s := out.Subscription("main", "researcher", "digest"); s != nil {
		t.Error("copy: the refused digest was added")
	}
}
