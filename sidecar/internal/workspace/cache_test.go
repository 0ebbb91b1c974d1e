package workspace

import (
	"fmt"
	"testing"
)

func TestRecordCacheEvictsTheTreesUsedLongestAgo(t *testing.T) {
	c := newRecordCache(25)
	records := func(n int) map[string]agreed {
		m := map[string]agreed{}
		for i := range n {
			m[fmt.Sprint(i)] = agreed{hash: "h"}
		}
		return m
	}
	c.putState("a", records(10))
	c.putState("b", records(10))
	if _, ok := c.state("a"); !ok { // a is now the newer of the two
		t.Fatal("a not cached")
	}
	c.putState("c", records(10)) // 30 > 25: b leaves
	if _, ok := c.state("b"); ok {
		t.Fatal("b, used longest ago, is still cached")
	}
	for _, k := range []string{"a", "c"} {
		if m, ok := c.state(k); !ok || len(m) != 10 {
			t.Fatalf("%s: %d records, %v", k, len(m), ok)
		}
	}
	if c.held != 20 {
		t.Fatalf("held = %d, want 20", c.held)
	}

	// A copy is handed out: changing it changes nothing cached, and a cached change
	// does not reach a copy handed out before.
	m, _ := c.state("a")
	m["x"] = agreed{}
	c.setState("a", "y", agreed{hash: "y"})
	if got, _ := c.state("a"); len(got) != 11 || got["y"].hash != "y" {
		t.Fatalf("a after setState: %d records", len(got))
	}
	if _, ok := m["y"]; ok {
		t.Fatal("a copy handed out earlier changed")
	}

	// Forgetting one kind keeps the others; a tree larger than the cache is not kept.
	c.putHashes("a", map[string]localStat{"f": {size: 1}})
	c.forget("a", stateRecords)
	if _, ok := c.state("a"); ok {
		t.Fatal("state still cached after forget")
	}
	if h, ok := c.hashes("a"); !ok || len(h) != 1 {
		t.Fatal("hashes dropped with the state")
	}
	c.putState("huge", records(30))
	if _, ok := c.state("huge"); ok {
		t.Fatal("a tree larger than the whole cache is cached")
	}
	if c.held > c.max {
		t.Fatalf("held %d > max %d", c.held, c.max)
	}
}
