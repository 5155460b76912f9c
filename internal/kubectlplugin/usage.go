package kubectlplugin

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// TopDoc is `kubectl gpuslice top -o json|yaml` (kind GPUTop): per node and
// GPU, the capacity its agent published and what pods have booked.
type TopDoc struct {
	output.TypeMeta `json:",inline"`
	Nodes           []TopNode `json:"nodes"`
}

// TopNode is one GPUNode row.
type TopNode struct {
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Heartbeat time.Time `json:"heartbeat"` // the agent's last Lease renewal
	Message   string    `json:"message,omitempty"`
	GPUs      []TopGPU  `json:"gpus"`
}

// TopGPU is one GPU: capacity and measurements from the agent, bookings
// summed over the pods assigned to it.
type TopGPU struct {
	Index       int32  `json:"index"`
	UUID        string `json:"uuid"`
	Model       string `json:"model"`
	Health      string `json:"health"`
	SharingMode string `json:"sharingMode"` // timeslice or mps
	UnitsTotal  int64  `json:"unitsTotal"`
	UnitsBooked int64  `json:"unitsBooked"` // by the pods assigned to the GPU
	// UnitsFree and MemoryFreeBytes: not assigned, as the node agent sees it.
	UnitsFree             int64 `json:"unitsFree"`
	MemoryBytes           int64 `json:"memoryBytes"`
	MemoryBookedBytes     int64 `json:"memoryBookedBytes"`
	MemoryFreeBytes       int64 `json:"memoryFreeBytes"`
	UtilizationPercent    int32 `json:"utilizationPercent"`
	Pods                  int   `json:"pods"`
	Exclusive             bool  `json:"exclusive"` // a pod holds the whole GPU
	MPSClients            int32 `json:"mpsClients"`
	UnscheduledProcesses  int32 `json:"unscheduledProcesses"`
	MemoryGuaranteedBytes int64 `json:"memoryGuaranteedBytes"`
	MemoryBorrowedBytes   int64 `json:"memoryBorrowedBytes"`
	MemorySpilledBytes    int64 `json:"memorySpilledBytes"`
}

// PodsDoc is `kubectl gpuslice pods -o json|yaml` (kind GPUPodList): one
// item per container and GPU share.
type PodsDoc struct {
	output.TypeMeta `json:",inline"`
	Items           []PodShare `json:"items"`
}

// PodShare is the share of one GPU one container of a pod holds.
type PodShare struct {
	Namespace   string `json:"namespace"`
	Pod         string `json:"pod"`
	Container   string `json:"container"`
	Node        string `json:"node"`
	Phase       string `json:"phase"`
	GPUIndex    int32  `json:"gpuIndex"`
	UUID        string `json:"uuid"`
	Units       int64  `json:"units"`
	MemoryBytes int64  `json:"memoryBytes"`
	Exclusive   bool   `json:"exclusive"`
}

// holds reports whether p still holds what it was assigned: a pod that
// ended has given its GPUs back.
func holds(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// assignmentOf parses p's assignment; ok is false for pods gpuslice did not
// place (or whose annotation is unreadable: they are left out, not trusted).
func assignmentOf(p *corev1.Pod) (*api.Assignment, bool) {
	s, ok := p.Annotations[api.AnnotationAssignment]
	if !ok {
		return nil, false
	}
	a, err := api.ParseAssignment(s)
	return a, err == nil
}

// Shares lists every GPU share the pods hold, by namespace, pod, container.
func Shares(pods []corev1.Pod) PodsDoc {
	doc := PodsDoc{TypeMeta: output.Meta("GPUPodList"), Items: []PodShare{}}
	for i := range pods {
		p := &pods[i]
		a, ok := assignmentOf(p)
		if !ok || !holds(p) {
			continue
		}
		for _, c := range a.Containers {
			for _, g := range c.GPUs {
				doc.Items = append(doc.Items, PodShare{Namespace: p.Namespace, Pod: p.Name, Container: c.Name, Node: a.Node,
					Phase: string(p.Status.Phase), GPUIndex: g.Index, UUID: g.UUID, Units: g.Units, MemoryBytes: g.MemoryBytes,
					Exclusive: g.Exclusive})
			}
		}
	}
	slices.SortStableFunc(doc.Items, func(a, b PodShare) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod))
	})
	return doc
}

// Top joins the GPUNode rows with the pods' bookings.
func Top(nodes []v1alpha2.GPUNode, pods []corev1.Pod) TopDoc {
	type key struct {
		node string
		gpu  int32
	}
	booked := map[key]*TopGPU{}
	for i := range pods {
		p := &pods[i]
		a, ok := assignmentOf(p)
		if !ok || !holds(p) {
			continue
		}
		for idx, t := range a.Totals() {
			k := key{a.Node, idx}
			if booked[k] == nil {
				booked[k] = &TopGPU{}
			}
			b := booked[k]
			b.UnitsBooked += t.Units
			b.MemoryBookedBytes += t.MemoryBytes
			b.Pods++
			b.Exclusive = b.Exclusive || t.Exclusive
		}
	}
	doc := TopDoc{TypeMeta: output.Meta("GPUTop"), Nodes: []TopNode{}}
	for _, n := range nodes {
		tn := TopNode{Name: n.Name, State: string(n.Status.State), Message: n.Status.Message, GPUs: []TopGPU{}}
		for _, g := range n.Status.GPUs {
			mode := string(g.SharingMode)
			if mode == "" {
				mode = string(api.SharingTimeslice)
			}
			tg := TopGPU{Index: g.Index, UUID: g.UUID, Model: g.Model, Health: string(g.Health), SharingMode: mode,
				UnitsTotal: g.UnitsTotal, UnitsFree: g.UnitsFree, MemoryBytes: g.Memory.Value(), MemoryFreeBytes: g.MemoryFree.Value(),
				UtilizationPercent: g.UtilizationPercent, MPSClients: g.MPSClients, UnscheduledProcesses: g.UnscheduledProcesses,
				MemoryGuaranteedBytes: g.MemoryGuaranteed.Value(), MemoryBorrowedBytes: g.MemoryBorrowed.Value(),
				MemorySpilledBytes: g.MemorySpilled.Value()}
			if b := booked[key{n.Name, g.Index}]; b != nil {
				tg.UnitsBooked, tg.MemoryBookedBytes, tg.Pods, tg.Exclusive = b.UnitsBooked, b.MemoryBookedBytes, b.Pods, b.Exclusive
			}
			tn.GPUs = append(tn.GPUs, tg)
		}
		slices.SortFunc(tn.GPUs, func(a, b TopGPU) int { return cmp.Compare(a.Index, b.Index) })
		doc.Nodes = append(doc.Nodes, tn)
	}
	slices.SortFunc(doc.Nodes, func(a, b TopNode) int { return cmp.Compare(a.Name, b.Name) })
	return doc
}
