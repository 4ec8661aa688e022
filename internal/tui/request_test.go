package tui

import (
	"testing"

	"github.com/bcpgw/bcpgw/bcp"
)

// An enum's values are the requesting Controller's text: each is quoted,
// so that a value holding a comma does not read as two, and what is
// invisible is escaped.
func TestFieldLineQuotesEnumValues(t *testing.T) {
	lo, hi := int64(1), int64(5)
	for _, c := range []struct {
		f    bcp.Field
		want string
	}{
		{bcp.Field{Name: "level", Type: bcp.Enum, Values: []string{"high, low", "x"}}, `level: one of "high, low", "x"`},
		{bcp.Field{Name: "tag", Type: bcp.Enum, Values: []string{"a\u200bb"}}, `tag: one of "a\u200bb"`},
		{bcp.Field{Name: "urgent", Type: bcp.Boolean}, "urgent: true or false"},
		{bcp.Field{Name: "score", Type: bcp.Integer, Min: &lo, Max: &hi}, "score: an integer, from 1 to 5"},
	} {
		if got := fieldLine(c.f); got != c.want {
			t.Errorf("fieldLine(%+v) = %s, want %s", c.f, got, c.want)
		}
	}
}
