package sched

import (
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

func agentLease(node, holder string, renewed *time.Time, secs int32) *coordv1.Lease {
	le := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.LeaseNamespace, Name: api.LeaseName(node),
		Labels: map[string]string{api.LabelLeaseNode: node}}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}
	if renewed != nil {
		le.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
	}
	if secs != 0 {
		le.Spec.LeaseDurationSeconds = &secs
	}
	return le
}

func TestLeaseOf(t *testing.T) {
	good := agentLease("n1", "n1", &t0, 40)
	node, le, err := leaseOf(good)
	if err != nil || node != "n1" || le != (alloc.Lease{Renewed: t0, Duration: 40 * time.Second}) {
		t.Fatalf("leaseOf = %q %+v %v", node, le, err)
	}
	if _, le, err := leaseOf(agentLease("n1", "n1", nil, 0)); err != nil || !le.Renewed.IsZero() || le.Duration != 0 {
		t.Fatalf("never renewed: %+v %v", le, err)
	}
	noLabel := good.DeepCopy()
	noLabel.Labels = nil
	otherName := good.DeepCopy()
	otherName.Name = "gpuslice-n2"
	noHolder := good.DeepCopy()
	noHolder.Spec.HolderIdentity = nil
	for name, bad := range map[string]*coordv1.Lease{"no label": noLabel, "other name": otherName,
		"other holder": agentLease("n1", "n2", &t0, 40), "no holder": noHolder} {
		if _, _, err := leaseOf(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// SetLease reports a revival only when the node was not live before and is
// now: a renewal of a live Lease is not one.
func TestSetLeaseRevives(t *testing.T) {
	l, clk := newBooks(t)
	if err := l.SetGPUNode(gpuNode("n1", 1, t0)); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		now     time.Time
		renewed time.Time
		want    bool
	}{
		{t0, t0, true}, // first Lease
		{t0.Add(10 * time.Second), t0.Add(10 * time.Second), false}, // renewal
		{t0.Add(5 * time.Minute), t0.Add(-time.Hour), false},        // an old renewal: still expired
		{t0.Add(5 * time.Minute), t0.Add(5 * time.Minute), true},    // back
	}
	for i, s := range steps {
		clk.SetTime(s.now)
		if got := l.SetLease("n1", alloc.Lease{Renewed: s.renewed, Duration: 40 * time.Second}); got != s.want {
			t.Fatalf("step %d: revived = %v, want %v", i, got, s.want)
		}
	}
	l.RemoveLease("n1")
	req := &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, Units: 10}}}
	if err := l.Check("n1", req); err == nil {
		t.Fatal("fits without a Lease")
	}
}
