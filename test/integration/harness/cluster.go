package harness

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// GiB is 2^30 bytes.
const GiB = int64(1) << 30

// NodeSpec describes a fake GPU node.
type NodeSpec struct {
	Name      string
	GPUs      int
	GPUMemory int64 // bytes per GPU
	Kwok      bool  // managed by KWOK (annotation + taint)
	// Extended advertises the gpuslice resources as plain extended
	// resources in node capacity (for the stock scheduler).
	Extended bool
	// Labels are added to the Node.
	Labels map[string]string
}

// Node builds the Node object: Ready, schedulable, 64 CPUs.
func (s NodeSpec) Node() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: map[string]string{"kubernetes.io/hostname": s.Name}}}
	for k, v := range s.Labels {
		n.Labels[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("250"),
	}
	if s.Extended {
		capacity[api.ResourceGPU] = *resource.NewQuantity(int64(s.GPUs), resource.DecimalSI)
		capacity[api.ResourceUnits] = *resource.NewQuantity(int64(s.GPUs)*api.DefaultUnitsPerGPU, resource.DecimalSI)
		capacity[api.ResourceMemory] = *resource.NewQuantity(int64(s.GPUs)*s.GPUMemory, resource.BinarySI)
	}
	n.Status.Capacity, n.Status.Allocatable = capacity, capacity
	if s.Kwok {
		n.Annotations = map[string]string{"kwok.x-k8s.io/node": "fake"}
		n.Spec.Taints = []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}
	} else {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	}
	return n
}

// GPUNode builds the node's table row as a fresh, healthy, idle publisher would.
func (s NodeSpec) GPUNode(now time.Time) *v1alpha2.GPUNode {
	g := &v1alpha2.GPUNode{TypeMeta: metav1.TypeMeta{APIVersion: api.Group + "/" + v1alpha2.Version, Kind: v1alpha2.GPUNodeKind},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name}}
	g.Status = v1alpha2.GPUNodeStatus{State: v1alpha2.NodeWorking, UpdateTime: metav1.NewTime(now), PeriodSeconds: 10}
	for i := 0; i < s.GPUs; i++ {
		g.Status.GPUs = append(g.Status.GPUs, v1alpha2.GPU{Index: int32(i), UUID: fmt.Sprintf("GPU-%s-%d", s.Name, i), Model: "gpuslice simulated GPU",
			Memory: v1alpha2.Bytes(s.GPUMemory), UnitsTotal: api.DefaultUnitsPerGPU, UnitsFree: api.DefaultUnitsPerGPU, MemoryFree: v1alpha2.Bytes(s.GPUMemory), Health: v1alpha2.GPUHealthy})
	}
	g.Status.Summary = v1alpha2.Summarize(g.Status.GPUs)
	return g
}

// CreateNode creates the Node (with status) and, unless Extended, its GPUNode.
func (cp *ControlPlane) CreateNode(ctx context.Context, s NodeSpec, now time.Time) error {
	n := s.Node()
	status := n.Status
	created, err := cp.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", s.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		// KWOK may initialize the node concurrently; it keeps our capacity.
		created.Status.Capacity, created.Status.Allocatable = status.Capacity, status.Allocatable
		if len(status.Conditions) > 0 {
			created.Status.Conditions = status.Conditions
		}
		_, err := cp.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if cur, gerr := cp.Client.CoreV1().Nodes().Get(ctx, s.Name, metav1.GetOptions{}); gerr == nil {
				created = cur
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", s.Name, err)
	}
	if s.Extended {
		return nil
	}
	if err := PutGPUNode(ctx, cp.GPUNodes, s.GPUNode(now)); err != nil {
		return err
	}
	return PutLease(ctx, cp.Client, s.Name, now, time.Hour)
}

// PutLease creates or updates the node agent's Lease (its liveness) as
// renewed at renewed, holding for d.
func PutLease(ctx context.Context, cs kubernetes.Interface, node string, renewed time.Time, d time.Duration) error {
	c := cs.CoordinationV1().Leases(api.LeaseNamespace)
	holder, secs, at := node, int32(d/time.Second), metav1.NewMicroTime(renewed)
	spec := coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &at}
	cur, err := c.Get(ctx, api.LeaseName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: api.LeaseName(node), Namespace: api.LeaseNamespace,
			Labels: map[string]string{api.LabelLeaseNode: node}}, Spec: spec}, metav1.CreateOptions{})
	} else if err == nil {
		cur.Spec = spec
		_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("lease of node %s: %w", node, err)
	}
	return nil
}

// PutGPUNode creates or replaces a GPUNode row: metadata by create or update,
// status through the status subresource, as the node agent writes it.
func PutGPUNode(ctx context.Context, gc versioned.Interface, g *v1alpha2.GPUNode) error {
	c := gc.GpusliceV1alpha2().GPUNodes()
	cur, err := c.Get(ctx, g.Name, metav1.GetOptions{})
	if err != nil {
		if cur, err = c.Create(ctx, g.DeepCopy(), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create GPUNode %s: %w", g.Name, err)
		}
	} else {
		u := g.DeepCopy()
		u.ResourceVersion = cur.ResourceVersion
		if cur, err = c.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update GPUNode %s: %w", g.Name, err)
		}
	}
	cur.Status = *g.Status.DeepCopy()
	if _, err := c.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update GPUNode %s status: %w", g.Name, err)
	}
	return nil
}
