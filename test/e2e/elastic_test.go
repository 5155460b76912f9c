package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testbin"
)

// tenant is gs-elastic under gpuslice run, driven through its stdin.
type tenant struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	err   testbin.Output
}

func startTenant(t *testing.T, environ []string, name string, args ...string) *tenant {
	t.Helper()
	bin := binDir(t)
	full := append([]string{"run", "--group", name}, args...)
	tn := &tenant{t: t, name: name, lines: make(chan string, 256)}
	tn.cmd = exec.Command(filepath.Join(bin, "gpuslice"), full...)
	tn.cmd.Env, tn.cmd.Stderr = environ, &tn.err
	var err error
	if tn.in, err = tn.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := tn.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			tn.lines <- sc.Text()
		}
		close(tn.lines)
	}()
	t.Cleanup(tn.stop)
	return tn
}

func (tn *tenant) stop() {
	if tn.in != nil {
		_, _ = io.WriteString(tn.in, "exit\n")
		_ = tn.in.Close()
		tn.in = nil
		_ = tn.cmd.Wait()
	}
}

// until collects lines up to the first that starts with prefix.
func (tn *tenant) until(prefix string) []string {
	tn.t.Helper()
	var got []string
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-tn.lines:
			if !ok {
				tn.t.Fatalf("%s ended before %q: %q\nstderr: %s", tn.name, prefix, got, tn.err.String())
			}
			got = append(got, l)
			if strings.HasPrefix(l, prefix) {
				return got
			}
		case <-timeout:
			tn.t.Fatalf("%s: no %q within 60s: %q", tn.name, prefix, got)
		}
	}
}

func (tn *tenant) send(cmd string) {
	tn.t.Helper()
	if _, err := io.WriteString(tn.in, cmd+"\n"); err != nil {
		tn.t.Fatal(err)
	}
}

// field returns key=value's value in an output line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func held(t *testing.T, lines []string) uint64 {
	t.Helper()
	for _, l := range lines {
		if strings.HasPrefix(l, "held ") {
			n, err := strconv.ParseUint(field(l, "bytes"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no held line in %q", lines)
	return 0
}

// maxAllocUs is the slowest successful allocation in the lines, and whether all succeeded.
func maxAllocUs(lines []string) (us int64, allOK bool) {
	allOK = true
	for _, l := range lines {
		if !strings.HasPrefix(l, "alloc ") {
			continue
		}
		if field(l, "rc") != "CUDA_SUCCESS" {
			allOK = false
			continue
		}
		v, _ := strconv.ParseInt(field(l, "us"), 10, 64)
		us = max(us, v)
	}
	return us, allOK
}

// TestElasticSpill: guarantees 6/6/6 GiB, ceilings 20 GiB, on a 24 GiB
// simulated GPU. A spilling group borrows while memory is free (18 GiB); the
// other two then claim their guarantees: the second finds the card full and
// gets its memory after the borrower's managed memory moved to the host; the
// borrower's data reads back the same.
func TestElasticSpill(t *testing.T) {
	e := env(t, "GPUSLICE_DRIVER=sim", noContextMemory) // the card's exact 24 GiB: 18 + 6 GiB, then 6 GiB more
	a := startTenant(t, e, "a", "--memory", "6GiB", "--memory-max", "20GiB", "--spill", "host", "--",
		filepath.Join(binDir(t), "gs-elastic"), "--hold", "18GiB", "--chunk", "2GiB")
	if got := held(t, a.until("ready")); got != 18*gib {
		t.Fatalf("a borrowed %d bytes while the card was free, want 18 GiB\n%s", got, a.err.String())
	}
	b := startTenant(t, e, "b", "--memory", "6GiB", "--memory-max", "20GiB", "--",
		filepath.Join(binDir(t), "gs-elastic"), "--hold", "6GiB", "--chunk", "2GiB")
	lb := b.until("ready")
	c := startTenant(t, e, "c", "--memory", "6GiB", "--memory-max", "20GiB", "--",
		filepath.Join(binDir(t), "gs-elastic"), "--hold", "6GiB", "--chunk", "2GiB")
	lc := c.until("ready")
	for _, g := range []struct {
		name  string
		lines []string
	}{{"b", lb}, {"c", lc}} {
		us, ok := maxAllocUs(g.lines)
		if !ok || held(t, g.lines) != 6*gib {
			t.Fatalf("%s failed within its guarantee: %q", g.name, g.lines)
		}
		t.Logf("%s: slowest allocation within the guarantee %d us", g.name, us)
	}
	a.send("check")
	if l := a.until("check"); !strings.HasPrefix(l[len(l)-1], "check ok") || field(l[len(l)-1], "kept") == "0" {
		t.Fatalf("a's data after the spill: %q", l)
	}
	// status.json is refreshed every 250 ms.
	want := "a      6.0 GiB  20.0 GiB  host   6.0 GiB     6.0 GiB   6.0 GiB"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st := status(t, e)
		if strings.Contains(st, want) {
			t.Logf("status:\n%s", st)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status should show a with 6 GiB guaranteed, 6 GiB borrowed, 6 GiB spilled:\n%s", st)
		}
	}
	checkStatusJSON(t, e, "a", 6*gib)
}

// checkStatusJSON reads `gpuslice status -o json` as a script would and
// finds group's elastic memory with spilled bytes spilled.
func checkStatusJSON(t *testing.T, environ []string, group string, spilled uint64) {
	t.Helper()
	r := run(t, environ, filepath.Join(binDir(t), "gpuslice"), "status", "-o", "json")
	var doc struct {
		APIVersion, Kind string
		GPUs             []struct {
			ElasticMemory []struct {
				Group        string `json:"group"`
				SpilledBytes uint64 `json:"spilledBytes"`
			} `json:"elasticMemory"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil || doc.APIVersion != "cli.gpuslice.io/v1" || doc.Kind != "Status" {
		t.Fatalf("status -o json: exit %d, %v: %s %s", r.code, err, r.stdout, r.stderr)
	}
	for _, g := range doc.GPUs {
		for _, m := range g.ElasticMemory {
			if m.Group == group && m.SpilledBytes == spilled {
				return
			}
		}
	}
	t.Fatalf("status -o json: no group %s with %d bytes spilled: %s", group, spilled, r.stdout)
}

// TestElasticNoSpill: without spill a borrow is refused once the other
// groups' guarantees need the rest, and they get their guarantees.
func TestElasticNoSpill(t *testing.T) {
	e := env(t, "GPUSLICE_DRIVER=sim")
	app := filepath.Join(binDir(t), "gs-elastic")
	b := startTenant(t, e, "b", "--memory", "6GiB", "--memory-max", "20GiB", "--", app, "--hold", "1GiB")
	c := startTenant(t, e, "c", "--memory", "6GiB", "--memory-max", "20GiB", "--", app, "--hold", "1GiB")
	b.until("ready")
	c.until("ready")
	// cuMemGetInfo inside b: its guarantee plus what it could borrow now
	// (24 GiB less c's guarantee and the reserve), not just the 6 GiB.
	b.send("info")
	info := b.until("info")
	if total, _ := strconv.ParseUint(field(info[len(info)-1], "total"), 10, 64); total <= 6*gib || total > 20*gib {
		t.Fatalf("b's cuMemGetInfo total %d: want more than its 6 GiB guarantee, at most its 20 GiB ceiling", total)
	}
	a := startTenant(t, e, "a", "--memory", "6GiB", "--memory-max", "20GiB", "--", app, "--hold", "20GiB", "--chunk", "2GiB")
	la := a.until("ready")
	// 24 GiB less b's and c's guarantees and the daemon's 256 MiB reserve: 11.75 GiB, in 2 GiB pieces.
	if got := held(t, la); got != 10*gib {
		t.Fatalf("a holds %d bytes, want 10 GiB (refused past what the guarantees leave)\n%q", got, la)
	}
	// stderr is written before the refusal returns; the pipe's copy may lag.
	if !a.err.WaitFor("kept for guarantees", 5*time.Second) {
		t.Fatalf("a's refusal should say why: %s", a.err.String())
	}
	for _, tn := range []*tenant{b, c} {
		tn.send("alloc 5GiB")
		if l := tn.until("alloc"); field(l[len(l)-1], "rc") != "CUDA_SUCCESS" {
			t.Fatalf("%s refused within its guarantee: %q\n%s", tn.name, l, tn.err.String())
		}
	}
}

func status(t *testing.T, environ []string) string {
	t.Helper()
	r := run(t, environ, filepath.Join(binDir(t), "gpuslice"), "status")
	if r.code != 0 {
		t.Fatalf("status: exit %d: %s", r.code, r.stderr)
	}
	return fmt.Sprint(r.stdout)
}
