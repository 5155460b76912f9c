//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// The burst: pods asking identical shares, all created at one instant.
const (
	burstLong   = 20 // run until deleted
	burstShort  = 20 // exit at once: they finish while the others are admitted
	burstUnits  = 5
	burstMemory = 64 << 20
	// burstListers call the kubelet's pod-resources List every burstListEvery
	// during the burst, as node monitoring agents do: each List runs the
	// kubelet's UpdateAllocatedDevices, which drops the devices of a pod that
	// is inactive at that moment (a finishing pod is, briefly). Together they
	// take 80 of the kubelet's 100 calls/s on the API (10 at once), which the
	// device plugin's own calls share.
	burstListers   = 2
	burstListEvery = 25 * time.Millisecond
	podResources   = "/var/lib/kubelet/pod-resources/kubelet.sock"
)

// testBurst: burstLong + burstShort pods of burstUnits units and
// burstMemory each (one device-plugin allocation size), created at one
// instant and interleaved, the short ones exiting as soon as they start: every
// pod is admitted by the kubelet (none fails with UnexpectedAdmissionError:
// "refusing to guess"), the short ones succeed, and each pod's container got
// its own group (the group file the device plugin handed it names the pod's
// group), whose share and memory.max are the pod's.
func testBurst(t *testing.T, ctx context.Context, n *node) {
	lctx, stopListers := context.WithCancel(ctx)
	lists := n.listPodResources(lctx, burstListers)
	var pods []*corev1.Pod
	for i := range burstLong + burstShort {
		cmd := `echo "group $GPUSLICE_GROUP_FILE"; exec sleep 3600`
		name := fmt.Sprintf("burst-%02d", i)
		if i%2 == 0 && i/2 < burstShort {
			cmd = `echo "group $GPUSLICE_GROUP_FILE"`
			name = fmt.Sprintf("burst-short-%02d", i)
		}
		pods = append(pods, sharePod(name, burstUnits, burstMemory, "", "/bin/sh", "-c", cmd))
	}
	created := make([]*corev1.Pod, len(pods))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			created[i] = n.createPod(ctx, p)
		}()
	}
	close(start)
	wg.Wait()
	var refused, wrong []string
	for _, p := range created {
		short := strings.HasPrefix(p.Name, "burst-short-")
		done := n.waitPod(bounded(ctx), p.Name, "running or done", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded || (!short && running(p))
		})
		if done.Status.Phase == corev1.PodFailed || (short != (done.Status.Phase == corev1.PodSucceeded)) {
			refused = append(refused, fmt.Sprintf("%s: %s %s: %s", p.Name, done.Status.Phase, done.Status.Reason, done.Status.Message))
			continue
		}
		if msg := n.ownGroup(ctx, done, !short); msg != "" {
			wrong = append(wrong, msg)
		}
	}
	stopListers()
	l := <-lists
	t.Logf("e2e burst: %d pods of %d units and %d MiB created at once (%d exiting at once), %d pod-resources Lists meanwhile "+
		"(%d finishing pods listed without their devices): %d admitted with their own groups, %d refused, %d with another group or limits",
		len(created), burstUnits, burstMemory>>20, burstShort, l.calls, l.dropped, len(created)-len(refused)-len(wrong), len(refused), len(wrong))
	for _, s := range append(refused, wrong...) {
		t.Errorf("e2e burst: %s", s)
	}
	names := make([]string, len(created))
	for i, p := range created {
		names[i] = p.Name
	}
	n.deletePods(bounded(ctx), names...)
}

// ownGroup checks that p's container got its own group (the group file it
// was handed, which it printed, is its group's) and, with limits, that the
// group has p's share and memory limit; it returns what is wrong ("" if
// nothing).
func (n *node) ownGroup(ctx context.Context, p *corev1.Pod, limits bool) string {
	name := groupOf(p)
	var line string
	err := waitFor(bounded(ctx), func() bool {
		line = n.logLines(p, "group ")
		return line != ""
	})
	if err != nil || !strings.Contains(line, "/"+name+"/") {
		return fmt.Sprintf("%s: its container was handed %q, not its group %s's file (%v)", p.Name, line, name, err)
	}
	if !limits {
		return ""
	}
	share, mem := n.groupFile(name, group.FileShare), n.groupFile(name, group.FileMemoryMax)
	if s, err := group.ParseShare(share); err != nil || s != float64(burstUnits)/api.DefaultUnitsPerGPU || limitOf(mem) != burstMemory {
		return fmt.Sprintf("%s: group %s share %q memory.max %q, want %d units and %d bytes", p.Name, name, share, mem, burstUnits, burstMemory)
	}
	return ""
}

// listing is what the burst's pod-resources Lists saw.
type listing struct {
	calls int
	// dropped: pods listed without devices after a List showed them
	// holding some (the kubelet dropped a finishing pod's devices while
	// still listing it).
	dropped int
}

// listPodResources calls the kubelet's pod-resources List every
// burstListEvery from each of k goroutines until ctx ends, then sends what
// the calls saw.
func (n *node) listPodResources(ctx context.Context, k int) <-chan listing {
	out := make(chan listing, 1)
	conn, err := grpc.NewClient("unix://"+podResources, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatalf("pod-resources: %v", err)
	}
	client := podresources.NewPodResourcesListerClient(conn)
	var mu sync.Mutex
	var l listing
	held, dropped := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, cancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := client.List(c, &podresources.ListPodResourcesRequest{})
				cancel()
				if err == nil {
					mu.Lock()
					l.calls++
					for _, p := range resp.PodResources {
						if !strings.HasPrefix(p.Name, "burst-") {
							continue
						}
						has := false
						for _, c := range p.Containers {
							has = has || len(c.Devices) > 0
						}
						if has {
							held[p.Name] = true
						} else if held[p.Name] {
							dropped[p.Name] = true
						}
					}
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(burstListEvery):
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		_ = conn.Close() // the calls are done
		l.dropped = len(dropped)
		out <- l
	}()
	return out
}
