//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

func stressScale() (nodes, pods int) {
	nodes, pods = 60, 2000
	if v, err := strconv.Atoi(os.Getenv("GPUSLICE_STRESS_PODS")); err == nil && v > 0 {
		pods = v
	}
	return nodes, pods
}

func mixedRequest(r *rand.Rand) harness.GPURequest {
	switch x := r.IntN(20); {
	case x < 2:
		return harness.GPURequest{GPUs: 1}
	case x < 3:
		return harness.GPURequest{GPUs: 2}
	default:
		return harness.GPURequest{Units: int64(10 * (1 + r.IntN(5))), Memory: int64(1+r.IntN(4)) * harness.GiB}
	}
}

// TestStressNoDoubleAllocation creates thousands of mixed GPU pods from
// concurrent clients while deleting pods at random and restarting the
// scheduler, then checks from the API server alone that no GPU is
// over-committed; finally it frees everything and fills every GPU whole,
// which only succeeds if the books kept no stale holding.
func TestStressNoDoubleAllocation(t *testing.T) {
	e, ns := setup(t)
	nodes, total := stressScale()
	e.nodes(t, ns+"-n", nodes, 8)
	sched := ns + "-sched"
	s1 := e.startScheduler(t, sched, staticRows)
	ctx := context.Background()
	pods := e.cp.Client.CoreV1().Pods(ns)
	zero := int64(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.stressLoad(t, ns, sched, total)
	}()
	time.Sleep(2 * time.Second)
	s1.Stop() // a restart in the middle of it
	e.startScheduler(t, sched, staticRows)
	<-done
	b := e.waitSettled(t, ns, ns+"-n")
	t.Logf("settled: %d bound, %d pending; %d/%d GPUs used, %d partly", b.Bound, b.Pending, b.UsedGPUs, b.GPUs, b.PartialGPUs)
	if b.Bound == 0 {
		t.Fatal("nothing was scheduled")
	}

	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	whole := names("w", nodes*8)
	for _, n := range whole {
		e.createPod(t, ns, n, sched, harness.GPURequest{GPUs: 1})
	}
	e.waitBound(t, ns, whole...)
	if b := e.checkBooks(t, ns, ns+"-n"); b.UsedGPUs != nodes*8 || b.PartialGPUs != 0 {
		t.Fatalf("after refill: %d GPUs used, %d partly; want %d, 0", b.UsedGPUs, b.PartialGPUs, nodes*8)
	}
	e.createPod(t, ns, "one-too-many", sched, harness.GPURequest{Units: 1})
	e.stayPending(t, ns, "one-too-many", 2*time.Second)
}

// stressLoad creates total mixed pods from 8 concurrent clients while
// deleting about 40% of them, some right after creation.
func (e *env) stressLoad(t *testing.T, ns, sched string, total int) {
	ctx := context.Background()
	pods := e.cp.Client.CoreV1().Pods(ns)
	zero := int64(0)
	var wg sync.WaitGroup
	created := make(chan string, total)
	const clients = 8
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 42))
			for i := c; i < total; i += clients {
				p := harness.Pod(ns, fmt.Sprintf("s-%d", i), sched, mixedRequest(r))
				p.Spec.NodeSelector = map[string]string{groupLabel: ns}
				if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Errorf("create: %v", err)
					return
				}
				created <- p.Name
			}
		}(c)
	}
	go func() {
		wg.Wait()
		close(created)
	}()
	r := rand.New(rand.NewPCG(9, 9))
	for name := range created {
		if r.IntN(5) >= 2 {
			continue
		}
		if r.IntN(2) == 0 {
			time.Sleep(time.Duration(r.IntN(50)) * time.Millisecond)
		}
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !isNotFound(err) {
			t.Errorf("delete %s: %v", name, err)
		}
	}
}

// waitSettled waits until the set of bound pods stops changing, checking
// the books from the API server each time.
func (e *env) waitSettled(t *testing.T, ns, prefix string) *harness.Books {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	last, stable := -1, 0
	for time.Now().Before(deadline) {
		b := e.checkBooks(t, ns, prefix)
		if b.Bound == last {
			stable++
		} else {
			stable = 0
		}
		if stable >= 3 {
			return b
		}
		last = b.Bound
		time.Sleep(time.Second)
	}
	t.Fatal("pods did not settle within 3 minutes")
	return nil
}
