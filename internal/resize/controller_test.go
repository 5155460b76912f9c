package resize

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestResyncOnlyPodsAskingForAChange: the resync re-queues the pods that
// ask for a change (api.AnnotationGPUs, AnnotationUnits, AnnotationMemory),
// not every pod of the cluster; a pod leaves the set when its request
// annotation goes or the pod is deleted.
func TestResyncOnlyPodsAskingForAChange(t *testing.T) {
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	c, err := New(Config{Client: client, Pods: f.Core().V1().Pods()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	pod := func(name string, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: ann}}
	}
	plain := pod("plain", nil)
	gpus := pod("gpus", map[string]string{api.AnnotationGPUs: "2"})
	units := pod("units", map[string]string{api.AnnotationUnits: "50"})
	for _, p := range []*corev1.Pod{plain, gpus, units} {
		c.enqueue(p)
	}
	drain := func() map[string]bool {
		got := map[string]bool{}
		for c.queue.Len() > 0 {
			k, _ := c.queue.Get()
			got[k] = true
			c.queue.Done(k)
			c.queue.Forget(k)
		}
		return got
	}
	if got := drain(); len(got) != 2 || !got["ns/gpus"] || !got["ns/units"] {
		t.Fatalf("queued on add: %v, want ns/gpus and ns/units", got)
	}
	c.resyncOnce()
	if got := drain(); len(got) != 2 || !got["ns/gpus"] || !got["ns/units"] {
		t.Fatalf("resync queued %v, want ns/gpus and ns/units", got)
	}
	c.enqueue(pod("gpus", nil)) // its annotation removed
	c.forget(cache.DeletedFinalStateUnknown{Key: "ns/units", Obj: units})
	c.resyncOnce()
	if got := drain(); len(got) != 0 {
		t.Fatalf("resync queued %v after the request went and the pod was deleted, want none", got)
	}
}
