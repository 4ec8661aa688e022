package agents_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

// indexSet is a hub controlling many readers, a second controller
// sharing some of them, and agents with no channel: the shapes where an
// index and a scan could disagree (order across controllers, a hub's
// many channels, names that do not exist).
func indexSet(t *testing.T, readers int) *agents.Set {
	t.Helper()
	files := map[string]string{}
	var hub, alt strings.Builder
	hub.WriteString("---\nname: hub\nruntime: /bin/true\ntools: [BCPQuery]\nbcp_channels:\n")
	alt.WriteString("---\nname: alt\nruntime: /bin/true\ntools: [BCPQuery]\nbcp_channels:\n")
	for i := range readers {
		r := fmt.Sprintf("r-%03d", i)
		fmt.Fprintf(&hub, `  - peer: %s
    role: controller
    max_category: 2
    budget_bits: 4000
    subscriptions:
      - {id: flags, category: 1, fields: [{name: ok, type: boolean}]}
      - {id: %s-only, category: 1, fields: [{name: n, type: integer, min: 0, max: 9}]}
`, r, r)
		channels := "  - {peer: hub, role: reader, max_category: 2, budget_bits: 4000}\n"
		if i%10 == 0 { // every tenth reader also answers to alt
			fmt.Fprintf(&alt, "  - {peer: %s, role: controller, max_category: 1, budget_bits: 4000, subscriptions: [{id: flags, category: 1, fields: [{name: alt, type: boolean}]}]}\n", r)
			channels += "  - {peer: alt, role: reader, max_category: 1, budget_bits: 4000}\n"
		}
		files[r+".md"] = fmt.Sprintf("---\nname: %s\nruntime: /bin/true\ntools: [BCPPublish]\nbcp_channels:\n%s---\n", r, channels)
	}
	files["hub.md"] = hub.String() + "---\n"
	files["alt.md"] = alt.String() + "---\n"
	files["solo.md"] = "---\nname: solo\nruntime: /bin/true\n---\n"
	return mustLoad(t, writeSet(t, files))
}

// TestIndexedLookupsMatchScan checks Link, Subscription, SubscriptionsFor
// and Definition.Channel, which are map lookups, against what a scan of
// the set's exported Links and Channels finds, for every pair of names
// (and names that are not agents).
func TestIndexedLookupsMatchScan(t *testing.T) {
	set := indexSet(t, 40)
	if got, want := len(set.Links), 40+4; got != want {
		t.Fatalf("%d links, want %d", got, want)
	}
	names := []string{"ghost", ""}
	for _, d := range set.Agents {
		names = append(names, d.Name)
	}
	scanLink := func(c, r string) *agents.Link {
		for _, l := range set.Links {
			if l.Controller.Name == c && l.Reader.Name == r {
				return l
			}
		}
		return nil
	}
	for _, c := range names {
		for _, r := range names {
			l := scanLink(c, r)
			if got := set.Link(c, r); got != l {
				t.Errorf("Link(%q, %q) = %v, scan finds %v", c, r, got, l)
			}
			ids := []string{"flags", r + "-only", "r-000-only", "ghost"}
			for _, id := range ids {
				var want *agents.Subscription
				if l != nil {
					for _, s := range l.ControllerSide.Subscriptions {
						if s.ID == id {
							want = s
							break
						}
					}
				}
				if got := set.Subscription(c, r, id); got != want {
					t.Errorf("Subscription(%q, %q, %q) = %v, scan finds %v", c, r, id, got, want)
				}
			}
			if d := set.Agent(c); d != nil {
				var want *agents.Channel
				for _, ch := range d.Channels {
					if ch.Peer == r {
						want = ch
						break
					}
				}
				if got := d.Channel(r); got != want {
					t.Errorf("%s.Channel(%q) = %v, scan finds %v", c, r, got, want)
				}
			}
		}
		var want []*agents.Subscription
		for _, l := range set.Links {
			if l.Reader.Name == c {
				want = append(want, l.ControllerSide.Subscriptions...)
			}
		}
		if got := set.SubscriptionsFor(c); !slices.Equal(got, want) {
			t.Errorf("SubscriptionsFor(%q) = %v, scan finds %v", c, got, want)
		}
	}

	// Ordered by controller, then as declared: alt's before hub's.
	var got []string
	for _, s := range set.SubscriptionsFor("r-010") {
		got = append(got, s.Controller+"/"+s.ID)
	}
	if want := []string{"alt/flags", "hub/flags", "hub/r-010-only"}; !slices.Equal(got, want) {
		t.Errorf("SubscriptionsFor(r-010) = %v, want %v", got, want)
	}

	// The slice is the set's own; a caller appending to it must not
	// change what the next caller gets.
	subs := set.SubscriptionsFor("r-010")
	_ = append(subs, &agents.Subscription{ID: "intruder"})
	if n := len(set.SubscriptionsFor("r-010")); n != 3 {
		t.Errorf("after an append by a caller, SubscriptionsFor(r-010) has %d items, want 3", n)
	}
	if s := set.SubscriptionsFor("r-011"); len(s) != 2 {
		t.Errorf("SubscriptionsFor(r-011) = %v, want hub's two", s)
	}
}

// TestTriOnyxDroppedChannelNotIndexed: a channel --compat trionyx drops
// (no mirror) is gone from the definition's index too, not only from
// its Channels.
func TestTriOnyxDroppedChannelNotIndexed(t *testing.T) {
	_, defs := writeTriOnyx(t, map[string]string{
		"agent-definitions/boss.md": "---\nname: boss\ntools: BCPQuery\nbcp_channels:\n" +
			"  - {peer: scout, role: controller, rates: {cat1: 1/hour}, budget_bits: 4000}\n" +
			"  - {peer: loner, role: controller, rates: {cat1: 1/hour}, budget_bits: 4000}\n---\n",
		"agent-definitions/scout.md": "---\nname: scout\ntools: BCPPublish\nbcp_channels:\n  - {peer: boss, role: reader, rates: {cat1: 1/hour}, budget_bits: 4000}\n---\n",
		"agent-definitions/loner.md": "---\nname: loner\ntools: Read\n---\n",
	})
	set := loadTriOnyx(t, defs, trionyxOpts())
	boss := set.Agent("boss")
	if c := boss.Channel("loner"); c != nil {
		t.Errorf("boss.Channel(loner) = %+v after the channel was dropped", c)
	}
	if c := boss.Channel("scout"); c == nil || c != boss.Channels[0] {
		t.Errorf("boss.Channel(scout) = %+v, want %+v", c, boss.Channels)
	}
	if set.Link("boss", "loner") != nil || set.Link("boss", "scout") == nil {
		t.Errorf("links %v", set.Links)
	}
}
