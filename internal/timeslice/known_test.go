package timeslice

import (
	"errors"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/proto"
)

// A GPU the driver lists anew (hot-added) tells onNew (the daemon probes
// contexts again); the first listing, the same list again, a failed listing
// and a shorter list do not.
func TestKnownGPUsNew(t *testing.T) {
	a, b := proto.UUID{1}, proto.UUID{2}
	var list []proto.UUID
	var fail error
	k := newKnownGPUs(func() ([]proto.UUID, error) { return list, fail }, klog.Background())
	news := 0
	var last []proto.UUID
	k.onNew = func(added []proto.UUID) { news, last = news+1, added }
	for i, step := range []struct {
		list []proto.UUID
		fail error
		want int
	}{
		{[]proto.UUID{a}, nil, 1},
		{[]proto.UUID{a}, nil, 1},
		{nil, errors.New("driver gone"), 1},
		{[]proto.UUID{a, b}, nil, 2}, // told b alone
		{[]proto.UUID{b}, nil, 2},
		{[]proto.UUID{a, b}, nil, 3},
	} {
		list, fail = step.list, step.fail
		k.mu.Lock()
		k.refreshLocked(time.Now())
		k.mu.Unlock()
		if news == 4 && (len(last) != 1 || last[0] != b) {
			t.Fatalf("step %d: onNew told %v, want b alone (a was listed before)", i, last)
		}
		if news != step.want {
			t.Fatalf("step %d (%v, %v): onNew told %d times, want %d", i, step.list, step.fail, news, step.want)
		}
	}
}
