package sched

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha1"
)

func TestUnpublished(t *testing.T) {
	for name, tc := range map[string]struct {
		st   v1alpha1.GPUNodeStatus
		want bool
	}{
		"created, no status": {v1alpha1.GPUNodeStatus{}, true},
		"published":          {v1alpha1.GPUNodeStatus{State: v1alpha1.NodeWorking, Heartbeat: metav1.Now()}, false},
		"state only":         {v1alpha1.GPUNodeStatus{State: v1alpha1.NodeNotReady}, false},
		"gpus only":          {v1alpha1.GPUNodeStatus{GPUs: []v1alpha1.GPU{{UUID: "a"}}}, false},
	} {
		if got := unpublished(&v1alpha1.GPUNode{Status: tc.st}); got != tc.want {
			t.Errorf("%s: unpublished = %v, want %v", name, got, tc.want)
		}
	}
}
