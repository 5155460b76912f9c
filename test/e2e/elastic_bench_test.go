//go:build elasticbench

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/elastic"
)

// TestBenchElastic is make bench-elastic: the borrow round trip and
// allocation throughput below and above the guarantee (gs-elastic under
// gpuslice run on the simulated GPU), the three-group spill scenario, the
// property run of the pure model, and four bursty tenants elastic vs static.
// Figures are printed as "figure: ..." lines, the summary line last.
func TestBenchElastic(t *testing.T) {
	app := filepath.Join(binDir(t), "gs-elastic")
	e := env(t, "GPUSLICE_DRIVER=sim", noContextMemory)
	num := func(lines []string, key string) float64 {
		v, err := strconv.ParseFloat(field(lines[len(lines)-1], key), 64)
		if err != nil {
			t.Fatalf("%s in %q: %v", key, lines, err)
		}
		return v
	}
	// Plain device memory, 1 MiB allocations.
	x := startTenant(t, e, "x", "--memory", "2GiB", "--memory-max", "20GiB", "--", app, "--hold", "1GiB")
	x.until("ready")
	x.send("bench 20000 1MiB")
	below := num(x.until("bench"), "us_per_op")
	x.send("alloc 1GiB") // the guarantee is full: every allocation now borrows
	x.until("alloc")
	x.send("grow 2000 1MiB")
	grow := num(x.until("grow"), "us_per_alloc")
	x.send("alloc 1GiB") // past the guarantee: lent once, then reused (no round trip)
	x.until("alloc")
	x.send("free")
	x.until("free")
	x.send("bench 20000 1MiB")
	above := num(x.until("bench"), "us_per_op")
	x.stop()
	y := startTenant(t, e, "y", "--memory", "2GiB", "--memory-max", "20GiB", "--spill", "host", "--", app, "--hold", "2GiB")
	y.until("ready")
	y.send("alloc 1GiB")
	y.until("alloc")
	y.send("free")
	y.until("free")
	y.send("bench 20000 1MiB")
	managed := num(y.until("bench"), "us_per_op")
	y.stop()
	fmt.Printf("figure: allocation+free of 1 MiB below memory.min: %.2f us (%.0f/s)\n", below, 1e6/below)
	fmt.Printf("figure: allocation+free of 1 MiB past memory.min, within what was lent: %.2f us (%.0f/s)\n", above, 1e6/above)
	fmt.Printf("figure: allocation+free of 1 MiB past memory.min, spill=host (managed memory): %.2f us (%.0f/s)\n", managed, 1e6/managed)
	fmt.Printf("figure: allocation that borrows (one round trip to the node daemon each): %.2f us; borrow round trip %.2f us\n",
		grow, grow-below/2)

	// The three-group scenario.
	spillOK, slowest := spillScenario(t)
	fmt.Printf("figure: guaranteed allocation that needed a spill: slowest %d us (reclaim wait limit 5 s)\n", slowest)

	// The pure model: random interleavings, and bursty tenants.
	var broken, over, lost int
	for seed := uint64(1); seed <= 2000; seed++ {
		m, _ := elastic.Interleave(seed, 400)
		broken, over, lost = broken+m.Broken, over+m.Overcommit, lost+m.Lost
	}
	fmt.Printf("figure: model, 2000 random interleavings x 400 operations: guarantees broken %d, over-commit %d, lost %d\n",
		broken, over, lost)
	st := elastic.Bursty(1, 4, 24<<30, 20<<30, 6000, false)
	el := elastic.Bursty(1, 4, 24<<30, 20<<30, 6000, true)
	fmt.Printf("figure: four bursty tenants on 24 GiB, 6 GiB guaranteed each, 60 s: memory in use elastic %.1f%% vs static %.1f%%; demand served %.1f%% vs %.1f%%\n",
		el.InUse*100, st.InUse*100, el.Served*100, st.Served*100)
	broken += el.Model.Broken + st.Model.Broken
	over += el.Model.Overcommit + st.Model.Overcommit
	ok := "no"
	if spillOK && lost == 0 {
		ok = "yes"
	}
	fmt.Printf("elastic: guarantees broken %d, over-commit %d, spill data ok %s, memory in use elastic %.1f%% vs static %.1f%%\n",
		broken, over, ok, el.InUse*100, st.InUse*100)
}

var smiUsed = regexp.MustCompile(`(\d+\.\d) GiB / (\d+\.\d) GiB`)

// spillScenario is TestElasticSpill measured: whether the borrower's data
// read back the same, and the slowest allocation within a guarantee (µs).
// The card's use is read from NVML after every step.
func spillScenario(t *testing.T) (bool, int64) {
	e := env(t, "GPUSLICE_DRIVER=sim", noContextMemory)
	app := filepath.Join(binDir(t), "gs-elastic")
	checkCard := func() {
		r := run(t, e, filepath.Join(binDir(t), "gpuslice"), "smi")
		m := smiUsed.FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("smi: %s %s", r.stdout, r.stderr)
		}
		used, _ := strconv.ParseFloat(m[1], 64)
		total, _ := strconv.ParseFloat(m[2], 64)
		if used > total {
			t.Fatalf("the simulated card holds %.1f GiB of %.1f GiB", used, total)
		}
	}
	a := startTenant(t, e, "a", "--memory", "6GiB", "--memory-max", "20GiB", "--spill", "host", "--", app, "--hold", "18GiB", "--chunk", "2GiB")
	a.until("ready")
	checkCard()
	var slowest int64
	for _, n := range []string{"b", "c"} {
		tn := startTenant(t, e, n, "--memory", "6GiB", "--memory-max", "20GiB", "--", app, "--hold", "6GiB", "--chunk", "2GiB")
		lines := tn.until("ready")
		us, ok := maxAllocUs(lines)
		if !ok || held(t, lines) != 6*gib {
			t.Fatalf("%s failed within its guarantee: %q", n, lines)
		}
		slowest = max(slowest, us)
		checkCard()
	}
	a.send("check")
	l := a.until("check")
	return strings.HasPrefix(l[len(l)-1], "check ok") && field(l[len(l)-1], "kept") != "0", slowest
}
