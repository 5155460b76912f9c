package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// stockResult is what the stock run left, read back with our books.
type stockResult struct {
	victims, wholeVictims int
	// misfits: preemptors bound where no GPU of the node has room for
	// them, after the remaining fillers (a GPU over-committed by our books).
	misfits []string
}

// gpuRoom is what one GPU has left by our books.
type gpuRoom struct {
	units, mem int64
	pods       int
	whole      bool
}

// stockBooks counts the victims of the stock run and places its bound
// preemptors on their nodes' GPUs as our books have them (the remaining
// fillers' assignments).
func stockBooks(ctx context.Context, cp *harness.ControlPlane, o options, ns string, fillers int) (stockResult, error) {
	var r stockResult
	pods, err := cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("list pods: %w", err)
	}
	rooms := map[string][]gpuRoom{}
	wanted := map[string][]api.ContainerRequest{}
	left, wholeLeft := 0, 0
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.Labels[fillerLabel] == "true" && p.DeletionTimestamp == nil:
			left++
			a, err := api.ParseAssignment(p.Annotations[api.AnnotationAssignment])
			if err != nil {
				return r, fmt.Errorf("filler %s: %w", p.Name, err)
			}
			if rooms[a.Node] == nil {
				rooms[a.Node] = freeGPUs(o.gpus)
			}
			for idx, t := range a.Totals() {
				if int(idx) >= len(rooms[a.Node]) {
					return r, fmt.Errorf("filler %s holds GPU %d of %d", p.Name, idx, o.gpus)
				}
				g := &rooms[a.Node][idx]
				g.units, g.mem, g.pods = g.units-t.Units, g.mem-t.MemoryBytes, g.pods+1
				if t.Exclusive {
					g.whole = true
					wholeLeft++
				}
			}
		case p.Labels[preemptorLabel] == "true" && p.Spec.NodeName != "":
			req, err := api.ParseRequest(p)
			if err != nil {
				return r, fmt.Errorf("preemptor %s: %w", p.Name, err)
			}
			wanted[p.Spec.NodeName] = append(wanted[p.Spec.NodeName], req.Containers...)
		}
	}
	r.victims, r.wholeVictims = fillers-left, o.nodes*fillerWhole-wholeLeft
	nodes := make([]string, 0, len(wanted))
	for node := range wanted {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		room := rooms[node]
		if room == nil {
			room = freeGPUs(o.gpus)
		}
		for _, c := range placeOnGPUs(room, wanted[node]) {
			r.misfits = append(r.misfits, fmt.Sprintf("%s: %s fits no GPU", node, requestText(c)))
		}
	}
	return r, nil
}

func freeGPUs(n int) []gpuRoom {
	out := make([]gpuRoom, n)
	for i := range out {
		out[i] = gpuRoom{units: api.DefaultUnitsPerGPU, mem: nodeGPUMemory}
	}
	return out
}

// placeOnGPUs places the requests on the GPUs, largest first, each on the
// first GPU with room (a whole GPU needs a GPU without pods; a share, one
// not held whole with its units and memory free), and returns those that
// fit nowhere. First fit, largest first, is not an exact packing, but with
// a node's few preemptors and GPUs this big it finds room where there is.
func placeOnGPUs(room []gpuRoom, reqs []api.ContainerRequest) []api.ContainerRequest {
	room = append([]gpuRoom(nil), room...)
	reqs = append([]api.ContainerRequest(nil), reqs...)
	size := func(c api.ContainerRequest) int64 {
		if c.Whole {
			return int64(c.Count) * api.DefaultUnitsPerGPU
		}
		return c.Units
	}
	sort.SliceStable(reqs, func(i, j int) bool { return size(reqs[i]) > size(reqs[j]) })
	var misfits []api.ContainerRequest
	for _, c := range reqs {
		need := 1
		if c.Whole {
			need = c.Count
		}
		for g := range room {
			if need == 0 {
				break
			}
			r := &room[g]
			switch {
			case c.Whole && r.pods == 0:
				r.units, r.mem, r.pods, r.whole = 0, 0, 1, true
				need--
			case !c.Whole && !r.whole && r.units >= c.Units && r.mem >= c.MemoryBytes:
				r.units, r.mem, r.pods = r.units-c.Units, r.mem-c.MemoryBytes, r.pods+1
				need--
			}
		}
		if need > 0 {
			misfits = append(misfits, c)
		}
	}
	return misfits
}

func requestText(c api.ContainerRequest) string {
	if c.Whole {
		return fmt.Sprintf("%d whole GPU(s)", c.Count)
	}
	return fmt.Sprintf("a share of %d units and %d GiB", c.Units, c.MemoryBytes/harness.GiB)
}

// restoreFillers puts the cluster back as a run (its scheduler stopped)
// found it: the preemptors (and the warm-up pod) deleted, the victims
// re-created with the same names, nodes and assignments, and KWOK
// reporting them running. A filler marked DisruptionTarget but not yet
// deleted (a run whose wait -preempt-rates-cap ended, its scheduler
// stopped mid-eviction) counts as a victim: deleted and re-created too.
func restoreFillers(ctx context.Context, cp *harness.ControlPlane, o options, ns string, fillers int) error {
	zero := int64(0)
	pods := cp.Client.CoreV1().Pods(ns)
	gone := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	present := map[string]bool{}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := harness.WaitFor(wctx, time.Second, func() (bool, error) {
		// again each time: a creation still in flight when the run ended
		if err := pods.DeleteCollection(wctx, gone, metav1.ListOptions{LabelSelector: preemptorLabel}); err != nil {
			return false, nil
		}
		l, err := pods.List(wctx, metav1.ListOptions{LabelSelector: preemptorLabel, Limit: 1})
		if err != nil || len(l.Items) > 0 {
			return false, nil
		}
		f, err := pods.List(wctx, metav1.ListOptions{LabelSelector: fillerLabel})
		if err != nil {
			return false, nil
		}
		clear(present)
		done := true
		for _, p := range f.Items {
			switch {
			case p.DeletionTimestamp != nil:
				done = false // a victim still going
			case markedVictim(&p):
				done = false
				_ = pods.Delete(wctx, p.Name, gone)
			default:
				present[p.Name] = true
			}
		}
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("the run's preemptors and victims did not go: %w", err)
	}
	all, err := fillerPods(ns, o)
	if err != nil {
		return err
	}
	var missing []*corev1.Pod
	for _, p := range all {
		if !present[p.Name] {
			missing = append(missing, p)
		}
	}
	if len(present)+len(missing) != fillers {
		return fmt.Errorf("%d filler pods present, %d missing, want %d", len(present), len(missing), fillers)
	}
	err = parallel(32, len(missing), func(i int) error {
		_, err := pods.Create(ctx, missing[i], metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("re-create the run's victims: %w", err)
	}
	return waitRunning(ctx, cp, ns, fillers)
}

// markedVictim says whether the pod carries the DisruptionTarget condition
// (chosen as a victim).
func markedVictim(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
