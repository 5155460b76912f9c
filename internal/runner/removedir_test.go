package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/group"
)

// The run's cleanup and the time-slice daemon's read-back writes race over the
// group directory: the removal must neither fail ("directory not empty") nor
// leave the directory or its renamed copy behind.
func TestRemoveGroupDirWhileDaemonWrites(t *testing.T) {
	runDir := t.TempDir()
	tree := group.NewTree(runDir)
	for i := range 200 {
		name := fmt.Sprintf("run-%d", i)
		if err := tree.Create(name); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the daemon refreshing memory.current
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = tree.WriteFile(name, group.FileMemoryCurrent, "0\n") // fails once the directory is gone
				}
			}
		}()
		err := removeGroupDir(tree.Path(name))
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("iteration %d: %v", i, err)
		}
		if _, err := os.Stat(tree.Path(name)); !os.IsNotExist(err) {
			t.Fatalf("iteration %d: group directory still there (%v)", i, err)
		}
	}
	left, err := filepath.Glob(filepath.Join(tree.Dir, ".removing-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v %v", left, err)
	}
	if err := removeGroupDir(tree.Path("missing")); err != nil {
		t.Fatalf("a missing directory: %v", err)
	}
}
