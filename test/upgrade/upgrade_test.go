//go:build upgrade

package upgrade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// During a rolling upgrade a node runs pods whose library is of one release
// beside a daemon (and CLI) of the other. Two ways round, each on a running
// group: a member holds 700 MiB under a 1 GiB limit, memory.max is lowered to
// 768 MiB by `gpuslice group set` once the group's memory.current shows it, and a second member gets
// only what is left (at most 68 MiB; with the limit not applied it would get
// about 324 MiB). The old release is built from UPGRADE_BASE's sources (make
// test-upgrade: the last commit before the groups manager, header version 1;
// the layout did not change, so version 1 is both the old and the current one).
func TestUpgradeMixedReleases(t *testing.T) {
	newBin, oldBin := os.Getenv("GPUSLICE_BIN"), os.Getenv("GPUSLICE_OLD_BIN")
	if newBin == "" || oldBin == "" {
		t.Skip("needs GPUSLICE_BIN and GPUSLICE_OLD_BIN (make test-upgrade)")
	}
	for _, tc := range []struct{ name, cli, lib string }{
		{"old library, new daemon", newBin, oldBin},
		{"new library, old daemon", oldBin, newBin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := mixBin(t, tc.cli, tc.lib, newBin)
			fills := runGroup(t, bin)
			t.Logf("upgrade: %s: first member %d MiB (%s), second after memory.max 1GiB -> 768MiB: %d MiB (%s)",
				tc.name, fills[0].Allocated>>20, fills[0].StoppedBy, fills[1].Allocated>>20, fills[1].StoppedBy)
			if fills[0].Allocated != 700<<20 {
				t.Fatalf("first member got %d bytes, want 700 MiB", fills[0].Allocated)
			}
			if fills[1].Allocated > 68<<20 || fills[1].StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" {
				t.Fatalf("second member got %d bytes (%s): the lowered limit did not reach the group", fills[1].Allocated,
					fills[1].StoppedBy)
			}
		})
	}
}

// mixBin is a bin directory with gpuslice (CLI and daemon) from cli, the
// library from lib, and the test programs and simulated GPU from tools:
// gpuslice finds the library beside its own executable.
func mixBin(t *testing.T, cli, lib, tools string) string {
	dir := t.TempDir()
	for _, f := range []struct{ from, name string }{{cli, "gpuslice"}, {lib, "libgpuslice.so"}, {tools, "gs-memfill"},
		{tools, "sim/libcuda.so.1"}, {tools, "sim/libnvidia-ml.so.1"}} {
		copyFile(t, filepath.Join(f.from, f.name), filepath.Join(dir, f.name))
	}
	for _, l := range []string{"libcuda.so", "libnvidia-ml.so"} {
		if err := os.Symlink(l+".1", filepath.Join(dir, "sim", l)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, cerr := io.Copy(out, in)
	if err := errors.Join(cerr, out.Close()); err != nil {
		t.Fatal(err)
	}
}

type fill struct {
	Allocated uint64 `json:"allocated"`
	StoppedBy string `json:"stopped_by"`
}

// runGroup runs the scenario in group "up" through bin's gpuslice and returns
// the two members' results.
func runGroup(t *testing.T, bin string) []fill {
	tmp := t.TempDir()
	runDir, err := os.MkdirTemp("", "gpuslice-upgrade-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeRunDir(t, runDir) })
	gs, fillCmd := filepath.Join(bin, "gpuslice"), filepath.Join(bin, "gs-memfill")
	// The holder prints its result, then holds until killed; the limit is
	// lowered once its 700 MiB shows in the group's memory.current (the
	// daemon's read-back, in both releases), polled for as long as it holds.
	current := filepath.Join(runDir, "groups", "up", "memory.current")
	// The second member starts once the daemon has written the lowered
	// limit into the group's state file (what the library enforces): an
	// old release's `group set` returns before its daemon applies it.
	setMark, appliedMark := filepath.Join(tmp, "set"), filepath.Join(tmp, "applied")
	script := fillCmd + ` --chunk 100MiB --max 700MiB --hold-ms 60000 & h=$!
n=0
until v=$(cat "` + current + `" 2>/dev/null); [ "${v:-0}" -ge ` + fmt.Sprint(700<<20) + ` ]; do
	n=$((n+1))
	if [ $n -ge 1200 ]; then echo "the holder's 700 MiB never showed in memory.current (last: ${v:-none})" >&2; kill $h; exit 1; fi
	sleep 0.05
done
` + gs + ` group set up memory.max=768MiB >/dev/null || { kill $h; exit 1; }
: > "` + setMark + `"
n=0
until [ -e "` + appliedMark + `" ]; do
	n=$((n+1))
	if [ $n -ge 1200 ]; then echo "the lowered limit never reached the group's state file" >&2; kill $h; exit 1; fi
	sleep 0.05
done
` + fillCmd + ` --chunk 4MiB
kill $h; wait $h; exit 0`
	cmd := exec.Command(gs, "run", "--group", "up", "--memory", "1GiB", "--", "sh", "-c", script)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GPUSLICE_RUN_DIR=" + runDir,
		"GPUSLICE_SIM_STATE=" + filepath.Join(tmp, "sim.state"), "GPUSLICE_SIM_MEMORY=24GiB",
		"GPUSLICE_SIM_CONTEXT_MEMORY=0"} // the exact figures above; the old release's library counted no context
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go markApplied(groupstate.Path(runDir, "up"), setMark, appliedMark, 768<<20)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\nstdout %s\nstderr %s", err, out.String(), errb.String())
	}
	var fills []fill
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var f fill
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("bad gs-memfill line %q: %v", line, err)
		}
		fills = append(fills, f)
	}
	if len(fills) != 2 {
		t.Fatalf("want 2 members' results, got %q (stderr %s)", out.String(), errb.String())
	}
	if fills[1].Allocated > fills[0].Allocated { // the holder is the larger
		fills[0], fills[1] = fills[1], fills[0]
	}
	return fills
}

// markApplied creates applied once set exists and every ready GPU slot of
// the group state file at state holds a limit of at most limit (the daemon
// has applied it); it gives up after a minute (the script then fails).
func markApplied(state, set, applied string, limit uint64) {
	for range 1200 {
		if _, err := os.Stat(set); err == nil && slotsLimited(state, limit) {
			_ = os.WriteFile(applied, nil, 0o644)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slotsLimited reports whether the state file has ready GPU slots and each
// holds a limit of at most limit (0 is none).
func slotsLimited(state string, limit uint64) bool {
	gpus, err := groupstate.ReadMemory(state)
	if err != nil || len(gpus) == 0 {
		return false
	}
	for _, g := range gpus {
		if g.Limit == 0 || g.Limit > limit {
			return false
		}
	}
	return true
}

// removeRunDir removes the run directory (its daemon then stops), retrying
// while the daemon still writes into it.
func removeRunDir(t *testing.T, dir string) {
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil {
			if _, serr := os.Stat(dir); os.IsNotExist(serr) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("remove run directory: %v", err)
}
