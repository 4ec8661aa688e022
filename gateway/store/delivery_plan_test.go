package store

import (
	"context"
	"strings"
	"testing"
)

// The outbox's and the operators' reads of deliveries go through the
// partial indexes, not through the table: their cost follows what they
// return, not the deliveries kept.
func TestDeliveryReadsUseIndexes(t *testing.T) {
	s := newStore(t)
	for i := range 3 {
		d := sampleDelivery(i)
		if err := s.AddDelivery(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		q    string
		args []any
		want string
	}{
		{`SELECT ` + deliveryColumns + ` FROM deliveries WHERE controller = ? AND state = 'pending' AND seq > ? ORDER BY seq LIMIT ?`,
			[]any{"main", 0, 64}, "USING INDEX deliveries_pending_by_controller"},
		{`SELECT count(*) FROM deliveries WHERE state = 'pending'`, nil, "deliveries_pending_by_controller"},
		{`SELECT count(*) FROM deliveries WHERE state = 'parked'`, nil, "deliveries_parked"},
		{`SELECT controller, reader, count(*) FROM deliveries WHERE state = 'pending' GROUP BY controller, reader`, nil,
			"USING INDEX deliveries_pending_by_controller"},
		{`SELECT ` + deliveryColumns + ` FROM deliveries WHERE seq > ? AND state = ? ORDER BY seq LIMIT ?`,
			[]any{0, "parked", 10}, "USING INDEX deliveries_parked"},
	} {
		plan := queryPlan(t, s, tt.q, tt.args...)
		if !strings.Contains(plan, tt.want) {
			t.Errorf("%s\nplan: %s\nwant it to use %s", tt.q, plan, tt.want)
		}
	}
}
