package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/localagent/agent/orchestrator/store"
)

// Sub-agents get distinct slots, the parent's last; one more waits (and
// says so once) until a slot is given back.
func TestSlotPool(t *testing.T) {
	p := newSlotPool(3, 0)
	queued := 0
	onWait := func(int) { queued++ }
	ctx := context.Background()
	var got []int
	for range 3 {
		id, err := p.take(ctx, onWait)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if got[0] != 1 || got[1] != 2 || got[2] != 0 || queued != 0 {
		t.Fatalf("slots %v, queued %d", got, queued)
	}
	done := make(chan int)
	go func() {
		id, _ := p.take(ctx, onWait)
		done <- id
	}()
	select {
	case id := <-done:
		t.Fatalf("took slot %d while all were busy", id)
	case <-time.After(50 * time.Millisecond):
	}
	p.give(2)
	if id := <-done; id != 2 || queued != 1 {
		t.Errorf("after give: slot %d, queued %d", id, queued)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.take(cctx, onWait); err == nil {
		t.Error("take on a cancelled context with no free slot succeeded")
	}
	// A server without slots (or one slot): everyone shares slot 0.
	if id, _ := newSlotPool(0, 0).take(ctx, onWait); id != 0 {
		t.Errorf("one-slot pool gave %d", id)
	}
	// The parent on slot 1 of 3: sub-agents get 0 and 2 first.
	p = newSlotPool(3, 1)
	var order []int
	for range 3 {
		id, _ := p.take(ctx, onWait)
		order = append(order, id)
	}
	if order[0] != 0 || order[1] != 2 || order[2] != 1 {
		t.Errorf("parent on slot 1: order %v", order)
	}
}

// Tasks spread over the server's slots by id, always within range.
func TestMainSlotSpreads(t *testing.T) {
	seen := map[int]bool{}
	for _, id := range []string{"a1b2c3", "d4e5f6", "0a0b0c", "ffeedd", "123456", "abcdef", "fedcba", "9f8e7d"} {
		r := &Run{Task: &store.Task{ID: id}, ep: &endpoint{slots: 4}}
		s := r.mainSlot()
		if s < 0 || s >= 4 || s != r.mainSlot() {
			t.Fatalf("task %s: slot %d", id, s)
		}
		seen[s] = true
	}
	if len(seen) < 2 {
		t.Errorf("eight tasks all on slot(s) %v", seen)
	}
	if s := (&Run{Task: &store.Task{ID: "x"}, ep: &endpoint{slots: 0}}).mainSlot(); s != 0 {
		t.Errorf("no slots reported: %d", s)
	}
}
