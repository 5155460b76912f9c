package sched

import (
	"context"
	"testing"
)

func TestLeader(t *testing.T) {
	l := NewLeader()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if waitLeading(ctx, l.Leading()) {
		t.Fatal("waitLeading true before Lead, with the context done")
	}
	l.Lead()
	l.Lead() // idempotent
	if !waitLeading(context.Background(), l.Leading()) {
		t.Fatal("waitLeading false after Lead")
	}
}
