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
	k.onNew = func() { news++ }
	for i, step := range []struct {
		list []proto.UUID
		fail error
		want int
	}{
		{[]proto.UUID{a}, nil, 1},
		{[]proto.UUID{a}, nil, 1},
		{nil, errors.New("driver gone"), 1},
		{[]proto.UUID{a, b}, nil, 2},
		{[]proto.UUID{b}, nil, 2},
		{[]proto.UUID{a, b}, nil, 3},
	} {
		list, fail = step.list, step.fail
		k.mu.Lock()
		k.refreshLocked(time.Now())
		k.mu.Unlock()
		if news != step.want {
			t.Fatalf("step %d (%v, %v): onNew told %d times, want %d", i, step.list, step.fail, news, step.want)
		}
	}
}
