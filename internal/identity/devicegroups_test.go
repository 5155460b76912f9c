package identity

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"testing"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// TestDeviceGroups: a caller in a mount namespace of its own (a container)
// whose GPUs' directories under groupstate.ContainerDevicesDir are bind mounts
// of two groups of the tree gets each GPU's group; a directory that is no
// group of the tree, a symbolic link to one, and an entry that is not named
// like a GPU count for nothing; a caller without the directory gets none.
func TestDeviceGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a process in a mount namespace of its own (unshare -m)")
	}
	tree := group.NewTree(t.TempDir())
	for _, n := range []string{"dra-a", "dra-b", "dra-c"} {
		if err := os.MkdirAll(tree.Path(n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const gpu1, gpu2 = "GPU-11111111-1111-1111-1111-111111111111", "GPU-22222222-2222-2222-2222-222222222222"
	d := groupstate.ContainerDevicesDir
	script := "set -e; mount -t tmpfs none /run; mkdir -p " + d + "/" + gpu1 + " " + d + "/" + gpu2 + " " +
		d + "/GPU-33333333-3333-3333-3333-333333333333 " + d + "/notagpu; " +
		"mount --bind " + tree.Path("dra-a") + " " + d + "/" + gpu1 + "; " +
		"mount --bind " + tree.Path("dra-b") + " " + d + "/" + gpu2 + "; " +
		"mount --bind " + tree.Path("dra-c") + " " + d + "/notagpu; " +
		"ln -s " + tree.Path("dra-c") + " " + d + "/GPU-44444444-4444-4444-4444-444444444444; " +
		"echo ready; exec sleep 1000"
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("container not set up: %q %v", line, err)
	}
	got, err := DeviceGroups("/proc", tree, Peer{PID: int32(cmd.Process.Pid)})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{gpu1[4:]: "dra-a", gpu2[4:]: "dra-b"}; !maps.Equal(got, want) {
		t.Errorf("device groups %v, want %v", got, want)
	}
	none, err := DeviceGroups("/proc", tree, Peer{PID: int32(os.Getpid())})
	if err != nil || len(none) != 0 {
		t.Errorf("a caller without %s: %v %v, want none", d, none, err)
	}
}
