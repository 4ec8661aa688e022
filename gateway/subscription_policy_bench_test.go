package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bcpgw/bcpgw/agents"
)

// BenchmarkPublishFilter compares the judgement of one Cat-1 push on a
// subscription without a filter and on one with a filter (the same
// fields): what a filter adds to the unlocked part of a publish.
//
//	go test -run XXX -bench PublishFilter -benchmem ./gateway
func BenchmarkPublishFilter(b *testing.B) {
	dir := b.TempDir()
	for _, a := range policyPair(100, "") {
		def := "---\nname: " + a.name + "\nruntime: [/bin/true]\n" + a.front + "\n---\n"
		if err := os.WriteFile(filepath.Join(dir, a.name+".md"), []byte(def), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	set, err := agents.LoadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	resp := []byte(`{"priority": "high", "score": 5}`)
	for _, sub := range []string{"limited", "filtered"} {
		b.Run(sub, func(b *testing.B) {
			p := Publish{Reader: "researcher", Controller: "main", SubscriptionID: sub, Response: resp}
			b.ReportAllocs()
			for b.Loop() {
				if v := ValidatePublish(set, p); !v.Accepted() || v.Filtered {
					b.Fatal(v.Detail())
				}
			}
		})
	}
}
