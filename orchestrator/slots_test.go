package orchestrator

import (
	"context"
	"testing"
	"time"
)

// Sub-agents get distinct slots, the parent's last; one more waits (and
// says so once) until a slot is given back.
func TestSlotPool(t *testing.T) {
	p := newSlotPool(3)
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
	if got[0] != 1 || got[1] != 2 || got[2] != mainSlot || queued != 0 {
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
	if id, _ := newSlotPool(0).take(ctx, onWait); id != mainSlot {
		t.Errorf("one-slot pool gave %d", id)
	}
}
