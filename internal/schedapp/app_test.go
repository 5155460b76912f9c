package schedapp

import (
	"context"
	"errors"
	"testing"

	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/kubernetes/pkg/features"

	"github.com/gpuslice/gpuslice/internal/sched"
)

type fakeLock struct {
	resourcelock.Interface
	err error
}

func (f fakeLock) Identity() string { return "me" }
func (f fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}
func (f fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return f.err
}

func leading(l *sched.Leader) bool {
	select {
	case <-l.Leading():
		return true
	default:
		return false
	}
}

// TestLeadingLock: the replica leads once it has written itself into the
// lock as holder, and not when the write failed or named another holder.
func TestLeadingLock(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		holder string
		err    error
		create bool
		want   bool
	}{
		{"update other holder", "other", nil, false, false},
		{"update failed", "me", errors.New("conflict"), false, false},
		{"create failed", "me", errors.New("exists"), true, false},
		{"update self", "me", nil, false, true},
		{"create self", "me", nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := sched.NewLeader()
			lock := &leadingLock{Interface: fakeLock{err: tc.err}, leader: l}
			r := resourcelock.LeaderElectionRecord{HolderIdentity: tc.holder}
			var err error
			if tc.create {
				err = lock.Create(ctx, r)
			} else {
				err = lock.Update(ctx, r)
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got := leading(l); got != tc.want {
				t.Fatalf("leading = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	if code := Main(context.Background(), []string{"--version"}); code != 0 {
		t.Fatalf("--version exit %d", code)
	}
}

// TestNominatedNodeNameForExpectationOff: gpuslice-scheduler does not
// patch nominatedNodeName before PreBind unless --feature-gates asks. Each
// Main starts as a new process's would: the process's registry of feature
// gate flags (kube-scheduler's options keep --feature-gates there) is emptied
// before it, else a run after the "true" case (go test -count=2) read the
// flag that case gave.
func TestNominatedNodeNameForExpectationOff(t *testing.T) {
	t.Cleanup(compatibility.DefaultComponentGlobalsRegistry.Reset)
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, false},
		{[]string{"--feature-gates=NominatedNodeNameForExpectation=true", "--version"}, true},
	} {
		compatibility.DefaultComponentGlobalsRegistry.Reset()
		if code := Main(context.Background(), tc.args); code != 0 {
			t.Fatalf("%v: exit %d", tc.args, code)
		}
		if got := utilfeature.DefaultFeatureGate.Enabled(features.NominatedNodeNameForExpectation); got != tc.want {
			t.Errorf("%v: NominatedNodeNameForExpectation %v, want %v", tc.args, got, tc.want)
		}
	}
}
