package agents_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
	"github.com/bcpgw/bcpgw/bcp"
)

// TestTriOnyxSpellings: TriOnyx's spellings load into the same specs as
// bcpgw's, completed, and runtime_dialect is read.
func TestTriOnyxSpellings(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agents")
	copyCase(t, filepath.Join("testdata", "valid", "trionyx-spellings"), dir)
	set, err := agents.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	main := set.Agent("main")
	if main.Dialect != agents.DialectTriOnyx || !main.TriOnyx() || set.Agent("researcher").TriOnyx() {
		t.Errorf("dialects: main %q, researcher %q", main.Dialect, set.Agent("researcher").Dialect)
	}
	subs := main.Channel("researcher").Subscriptions
	wantQ := []bcp.Question{
		{ID: "topic", MaxWords: 8, Format: bcp.ShortText},
		{ID: "author", MaxWords: 6, Format: bcp.PersonName},
		{ID: "published", Question: "When was it published?", MaxWords: 1, Format: bcp.Date},
	}
	if !reflect.DeepEqual(subs[0].Spec.Questions, wantQ) {
		t.Errorf("questions = %+v, want %+v", subs[0].Spec.Questions, wantQ)
	}
	wantF := []bcp.Field{
		{Name: "urgent", Type: bcp.Boolean},
		{Name: "level", Type: bcp.Enum, Values: []string{"low", "high", "critical"}},
		{Name: "mood", Type: bcp.Enum, Values: []string{"calm", "tense"}},
	}
	if !reflect.DeepEqual(subs[1].Spec.Fields, wantF) {
		t.Errorf("fields = %+v, want %+v", subs[1].Spec.Fields, wantF)
	}
	if subs[0].Bits != 11*(8+6+1) {
		t.Errorf("bits = %v", subs[0].Bits)
	}
}

// TestSpellingIsNoChange: a definition rewritten in the other spelling, or
// naming the default dialect, is the same definition (a reload restarts
// nothing for it); another dialect is a change.
func TestSpellingIsNoChange(t *testing.T) {
	const head = "---\nname: main\nruntime: [x]\n"
	const tail = "bcp_channels:\n  - peer: r\n    role: controller\n    max_category: 2\n    budget_bits: 100\n    subscriptions:\n"
	parse := func(extra, subs string) *agents.Definition {
		t.Helper()
		d, err := agents.Parse("main.md", []byte(head+extra+tail+subs+"---\nbody\n"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	ours := parse("", "      - {id: a, category: 1, fields: [{name: p, type: enum, values: [x, y]}]}\n      - {id: b, category: 2, questions: [{id: q, question: q, expected_format: date, max_words: 1}]}\n")
	theirs := parse("runtime_dialect: bcpgw\n", "      - {id: a, category: 1, fields: [{name: p, type: enum, options: [x, y]}]}\n      - {id: b, category: 2, questions: [{name: q, question: q, format: date, max_words: 1}]}\n")
	if !ours.Equal(theirs) {
		t.Error("the same definition in TriOnyx's spelling is not Equal")
	}
	tri := parse("runtime_dialect: trionyx\n", "      - {id: a, category: 1, fields: [{name: p, type: enum, values: [x, y]}]}\n      - {id: b, category: 2, questions: [{id: q, question: q, expected_format: date, max_words: 1}]}\n")
	if ours.Equal(tri) {
		t.Error("a change of dialect is Equal")
	}
}
