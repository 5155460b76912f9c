package harness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// The DRA driver's names, as gpuslice-node publishes them and the chart's
// DeviceClasses select them (docs/dra.md): one device per GPU, gpu-<index>,
// shared by consumable capacity "units" and "memory" (bytes).
const (
	DRADriver     = "gpuslice.io"
	DRAClassWhole = devices.ClassWhole // whole GPUs; extendedResourceName gpuslice.io/gpu
	DRAClassShare = devices.ClassShare // shares: capacity requests of units and memory
	DRAUnits      = devices.CapacityUnits
	DRAMemory     = devices.CapacityMemory
	// DRARequest is the request name every claim built here uses.
	DRARequest = "gpu"
)

// DRASlice is the ResourceSlice a node with gpus GPUs of memory bytes
// publishes (pool = node name), its devices built by the driver's own
// builder (internal/dra/devices): every GPU shareable, a request without a
// capacity request takes the whole GPU.
func DRASlice(nodeName string, gpus int, memory int64) (*resourceapi.ResourceSlice, error) {
	in := make([]devices.GPU, gpus)
	for i := range in {
		in[i] = devices.GPU{GPU: nodedev.GPU{Index: int32(i), UUID: fmt.Sprintf("GPU-%s-%d", nodeName, i), ProductName: "gpuslice simulated GPU",
			MemoryTotal: memory}, Sharing: api.SharingTimeslice, Units: api.DefaultUnitsPerGPU}
	}
	devs, err := devices.Build(in)
	if err != nil {
		return nil, fmt.Errorf("devices of %s: %w", nodeName, err)
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + DRADriver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: DRADriver, NodeName: ptr.To(nodeName),
			Pool:    resourceapi.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices: devs,
		},
	}, nil
}

// CreateDeviceClasses creates the whole-GPU and share DeviceClasses; with
// extended, the whole-GPU class carries extendedResourceName gpuslice.io/gpu.
func (cp *ControlPlane) CreateDeviceClasses(ctx context.Context, extended bool) error {
	sel := []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", DRADriver)}}}
	whole := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: DRAClassWhole}, Spec: resourceapi.DeviceClassSpec{Selectors: sel}}
	if extended {
		whole.Spec.ExtendedResourceName = ptr.To(string(api.ResourceGPU))
	}
	share := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: DRAClassShare}, Spec: resourceapi.DeviceClassSpec{Selectors: sel}}
	for _, c := range []*resourceapi.DeviceClass{whole, share} {
		if err := cp.putDeviceClass(ctx, c); err != nil {
			return fmt.Errorf("device class %s: %w", c.Name, err)
		}
	}
	return nil
}

// putDeviceClass creates c, or gives the existing class c's extended
// resource name: a class an earlier test left (with or without the
// mapping) must not decide whether this one's pods are mapped.
func (cp *ControlPlane) putDeviceClass(ctx context.Context, c *resourceapi.DeviceClass) error {
	dc := cp.Client.ResourceV1().DeviceClasses()
	_, err := dc.Create(ctx, c, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := dc.Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ptr.Equal(cur.Spec.ExtendedResourceName, c.Spec.ExtendedResourceName) {
			return nil
		}
		cur.Spec.ExtendedResourceName = c.Spec.ExtendedResourceName
		_, err = dc.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// DRAClaimSpec asks for r: r.GPUs whole GPUs, or else one share of r.Units
// units and r.Memory bytes of one GPU.
func DRAClaimSpec(r GPURequest) resourceapi.ResourceClaimSpec {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: DRAClassWhole, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: max(r.GPUs, 1)}
	if r.GPUs == 0 {
		req.DeviceClassName = DRAClassShare
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		if r.Units > 0 {
			req.Capacity.Requests[DRAUnits] = *resource.NewQuantity(r.Units, resource.DecimalSI)
		}
		if r.Memory > 0 {
			req.Capacity.Requests[DRAMemory] = *resource.NewQuantity(r.Memory, resource.BinarySI)
		}
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: DRARequest, Exactly: &req}}}}
}

// DRAPod is Pod with no extended resources, its container using the claim
// (a ResourceClaim named claim, or with template set a ResourceClaimTemplate).
func DRAPod(ns, name, scheduler, claim string, template bool) *corev1.Pod {
	p := Pod(ns, name, scheduler, GPURequest{})
	rc := corev1.PodResourceClaim{Name: DRARequest, ResourceClaimName: ptr.To(claim)}
	if template {
		rc = corev1.PodResourceClaim{Name: DRARequest, ResourceClaimTemplateName: ptr.To(claim)}
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{rc}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: DRARequest}}
	return p
}

// StartClaimController starts kube-controller-manager (bin) with the
// controllers DRA needs on a control plane without the rest: the resource
// claim controller (a pod's claims made from its ResourceClaimTemplates,
// removed with the pod, reservations released) and the garbage collector.
func (cp *ControlPlane) StartClaimController(_ context.Context, bin string) (*Process, error) {
	return cp.StartControllers(bin, "resourceclaim-controller", "garbage-collector-controller")
}
