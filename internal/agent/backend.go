package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// backend answers the device plugin from the kubelet's own records (the
// pod-resources API) and the API server.
type backend struct {
	pods      listersv1.PodLister
	client    kubernetes.Interface
	podSocket string
	groups    *groupmgr.Manager
	units     unitsTotal // each GPU's units total, for shares
	inject    deviceplugin.Inject
}

// Pending lists the containers the kubelet may be allocating for: the pods
// it works on (pod-resources List, which also says which containers hold
// devices already), with the groups Allocate made (deviceplugin.Records:
// the kubelet drops a finishing pod's devices while it still lists the pod;
// the group stays until the pod has left the node).
func (b *backend) Pending(ctx context.Context, resource string) ([]deviceplugin.Candidate, error) {
	conn, err := grpc.NewClient("unix://"+b.podSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod-resources: %w", err)
	}
	defer func() { _ = conn.Close() }() // the List result is what matters
	resp, err := listPodResources(ctx, podresources.NewPodResourcesListerClient(conn), listRetry{wait: listRateWait})
	if err != nil {
		return nil, fmt.Errorf("pod-resources list: %w", err)
	}
	held := map[string]map[string]bool{} // namespace/name/container -> resources
	var pods []*corev1.Pod
	for _, pr := range resp.PodResources {
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				if len(d.DeviceIds) > 0 {
					k := pr.Namespace + "/" + pr.Name + "/" + c.Name
					if held[k] == nil {
						held[k] = map[string]bool{}
					}
					held[k][d.ResourceName] = true
				}
			}
		}
		pod, err := b.pod(ctx, pr.Namespace, pr.Name)
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile
		} else if err != nil {
			return nil, err
		}
		pods = append(pods, pod)
	}
	tree := b.groups.Tree()
	return deviceplugin.Candidates(pods, corev1.ResourceName(resource), deviceplugin.Records{
		Held: func(p *corev1.Pod, c string, r corev1.ResourceName) (int, bool) {
			h := held[p.Namespace+"/"+p.Name+"/"+c]
			return len(h), h[string(r)]
		},
		Made: func(p *corev1.Pod, c string) bool {
			return tree.Exists(deviceplugin.GroupName(deviceplugin.Candidate{Name: p.Name, Container: c, UID: p.UID}))
		},
	}), nil
}

// listRateWait bounds how long Pending waits out the kubelet's rate limit on
// the pod-resources API (100 calls a second, 10 at once, shared by every
// client of the node: a busy monitoring agent must not fail admissions).
const listRateWait = time.Second

// listBackoffFirst and listBackoffMax: the waits between Lists the kubelet
// refused double from the first to the most (each jittered to its upper
// half): retried every 10 ms, a waiter made 100 calls a second, the
// kubelet's whole refill, and ate the budget it waited for.
const (
	listBackoffFirst = 10 * time.Millisecond
	listBackoffMax   = 200 * time.Millisecond
)

// listRetry is how listPodResources waits out the rate limit: at most wait
// slept in all; sleep waits d or until ctx ends (nil: a timer).
type listRetry struct {
	wait  time.Duration
	sleep func(ctx context.Context, d time.Duration) error
}

// listPodResources calls List, again while the kubelet answers that its rate
// limit is reached: after 10, 20, 40 ms ... at most 200 ms (each jittered),
// while the waits add up to at most r.wait.
func listPodResources(ctx context.Context, c podresources.PodResourcesListerClient, r listRetry) (*podresources.ListPodResourcesResponse, error) {
	sleep := r.sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	var slept time.Duration
	for step := listBackoffFirst; ; step = min(2*step, listBackoffMax) {
		resp, err := c.List(ctx, &podresources.ListPodResourcesRequest{})
		d := jitter(step)
		if status.Code(err) != codes.ResourceExhausted || slept+d > r.wait {
			return resp, err
		}
		if serr := sleep(ctx, d); serr != nil {
			return nil, fmt.Errorf("%w (after %w)", serr, err)
		}
		slept += d
	}
}

// jitter is a wait in the upper half of d (at random), so clients refused
// together do not come back together.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// sleepCtx waits d, or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pod reads a pod from the informer cache, or from the API server when the
// cache has not seen it (or its assignment) yet.
func (b *backend) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	if p, err := b.pods.Pods(ns).Get(name); err == nil && p.Annotations[api.AnnotationAssignment] != "" {
		return p, nil
	}
	p, err := b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ns, name, err)
	}
	return p, nil
}

// Prepare creates the container's group through the groups manager: its
// settings (ContainerSettings) and its state file (naming the host's pid
// namespace, so the container's processes get their host pids from the
// time-slice daemon); it returns the Allocate answer once the daemon has
// written the group's limit into the state file (the container starts held to it).
func (b *backend) Prepare(ctx context.Context, c deviceplugin.Candidate, gpus map[string]gpuset.GPU) (*pluginapi.ContainerAllocateResponse, error) {
	name := deviceplugin.GroupName(c)
	if c.Pod == nil {
		return nil, fmt.Errorf("%s: no pod", c)
	}
	s, err := ContainerSettings(c.Pod, c.GPUs, b.units)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	r, err := b.inject.Response(c, gpus, name)
	if err != nil {
		return nil, err
	}
	// Ungated (MPS clients): said in the group's directory, which the
	// container sees read-only; its GPUSLICE_GATE is not what the library reads.
	o := groupmgr.CreateOptions{Container: true, GateOff: r.Envs["GPUSLICE_GATE"] == "off"}
	if err := b.groups.Create(ctx, name, groupmgr.Resources{Settings: s, GPUs: gpuIDs(c.GPUs)}, o); err != nil {
		return nil, err
	}
	return r, nil
}
