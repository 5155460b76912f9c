package harness

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// Books is what the API server alone says about GPU use: the GPUNode rows
// and the assignment annotations of bound pods, added up per GPU.
type Books struct {
	Bound, Pending int
	// Problems lists over-committed GPUs and bound GPU pods without a
	// valid assignment for their node.
	Problems []string
	// Placement quality over healthy GPUs of the listed nodes.
	UsedGPUs, PartialGPUs, GPUs int
	NodeLoad                    []float64 // used units / total units per node
}

type gpuUse struct {
	units, mem       int64
	pods, exclusives int
}

// ReadBooks lists pods (in namespace ns, "" for all) and the GPUNodes whose
// names start with nodePrefix, and checks that no GPU is over-committed.
func ReadBooks(ctx context.Context, cp *ControlPlane, ns, nodePrefix string) (*Books, error) {
	pods, err := cp.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: ""})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	rows, err := cp.GPUNodes.GpusliceV1alpha2().GPUNodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list GPUNodes: %w", err)
	}
	b := &Books{}
	use := map[string]map[int32]*gpuUse{}
	for i := range pods.Items {
		b.addPod(&pods.Items[i], use)
	}
	for i := range rows.Items {
		g := rows.Items[i]
		if !strings.HasPrefix(g.Name, nodePrefix) {
			delete(use, g.Name)
			continue
		}
		b.addNode(&g, use[g.Name])
		delete(use, g.Name)
	}
	for node := range use {
		b.Problems = append(b.Problems, fmt.Sprintf("pods hold GPUs on %s, which has no GPUNode", node))
	}
	sort.Strings(b.Problems)
	return b, nil
}

func (b *Books) addPod(p *corev1.Pod, use map[string]map[int32]*gpuUse) {
	req, err := api.ParseRequest(p)
	if err != nil || req.Empty() || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	if p.Spec.NodeName == "" {
		b.Pending++
		return
	}
	b.Bound++
	a, err := api.ParseAssignment(p.Annotations[api.AnnotationAssignment])
	if err != nil || a.Node != p.Spec.NodeName || len(a.Containers) != len(req.Containers) {
		b.Problems = append(b.Problems, fmt.Sprintf("bound pod %s/%s: bad assignment (%v)", p.Namespace, p.Name, err))
		return
	}
	if use[a.Node] == nil {
		use[a.Node] = map[int32]*gpuUse{}
	}
	for idx, t := range a.Totals() {
		u := use[a.Node][idx]
		if u == nil {
			u = &gpuUse{}
			use[a.Node][idx] = u
		}
		u.units += t.Units
		u.mem += t.MemoryBytes
		u.pods++
		if t.Exclusive {
			u.exclusives++
		}
	}
}

func (b *Books) addNode(g *v1alpha2.GPUNode, use map[int32]*gpuUse) {
	var used, total int64
	for _, gpu := range g.Status.GPUs {
		u := use[gpu.Index]
		if u == nil {
			u = &gpuUse{}
		}
		delete(use, gpu.Index)
		if u.units > gpu.UnitsTotal || u.mem > gpu.Memory.Value() || (u.exclusives > 0 && u.pods > 1) {
			b.Problems = append(b.Problems, fmt.Sprintf("%s GPU %d over-committed: %d/%d units, %d/%d bytes, %d pods (%d whole)",
				g.Name, gpu.Index, u.units, gpu.UnitsTotal, u.mem, gpu.Memory.Value(), u.pods, u.exclusives))
		}
		if gpu.Health != v1alpha2.GPUHealthy {
			continue
		}
		b.GPUs++
		used += u.units
		total += gpu.UnitsTotal
		if u.pods > 0 {
			b.UsedGPUs++
			if u.units < gpu.UnitsTotal {
				b.PartialGPUs++
			}
		}
	}
	for idx := range use {
		b.Problems = append(b.Problems, fmt.Sprintf("pods hold GPU %d of %s, which it does not have", idx, g.Name))
	}
	if total > 0 {
		b.NodeLoad = append(b.NodeLoad, float64(used)/float64(total))
	}
}

// Fragmentation is the share of used GPUs that are only partly used.
func (b *Books) Fragmentation() float64 {
	if b.UsedGPUs == 0 {
		return 0
	}
	return float64(b.PartialGPUs) / float64(b.UsedGPUs)
}

// LoadStddev is the standard deviation of per-node load (0 = perfectly even).
func (b *Books) LoadStddev() float64 {
	if len(b.NodeLoad) == 0 {
		return 0
	}
	var mean, v float64
	for _, x := range b.NodeLoad {
		mean += x
	}
	mean /= float64(len(b.NodeLoad))
	for _, x := range b.NodeLoad {
		v += (x - mean) * (x - mean)
	}
	return math.Sqrt(v / float64(len(b.NodeLoad)))
}
