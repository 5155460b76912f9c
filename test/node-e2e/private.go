//go:build nodee2e

package nodee2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
)

const nsEnv = "GPUSLICE_NODE_E2E_PRIVATE_NS"

// privateNode starts the whole node for test name. The kubelet's
// device-plugin directory is fixed (/var/lib/kubelet), so the test first
// re-executes itself (only that test) in a private mount namespace with a
// tmpfs on /var/lib, where containerd, the kubelet and the agent all run:
// in the parent, privateNode runs the child and returns ok = false; in the
// child, it returns the started node (with the test namespace created) and
// ok = true. The caller stops the node. agentFlags are added to the agent's.
func privateNode(t *testing.T, name string, agentFlags ...string) (context.Context, *node, bool) {
	return privateNodeWith(t, name, nil, agentFlags...)
}

// privateNodeWith is privateNode with schedArgs added to gpuslice-scheduler's command line.
func privateNodeWith(t *testing.T, name string, schedArgs []string, agentFlags ...string) (context.Context, *node, bool) {
	if !privateMountNS(t, name) {
		return nil, nil, false
	}
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 20*time.Minute)
	t.Cleanup(cancel)
	n := startNodeWith(t, ctx, schedArgs, agentFlags...)
	if _, err := n.cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		n.stop()
		t.Fatal(err)
	}
	return ctx, n, true
}

// privateMountNS re-executes test name in a private mount namespace and
// returns false in the parent; in the child it mounts the tmpfs on /var/lib
// with the kubelet's directories and returns true.
func privateMountNS(t *testing.T, name string) bool {
	if os.Getenv(nsEnv) == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root: runs containerd, runc and a kubelet")
		}
		cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.timeout=25m")
		cmd.Env = append(os.Environ(), nsEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("node e2e in a private mount namespace: %v", err)
		}
		return false
	}
	if err := unix.Mount("tmpfs", "/var/lib", "tmpfs", 0, "mode=755"); err != nil {
		t.Fatalf("tmpfs on /var/lib: %v", err)
	}
	for _, d := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return true
}
