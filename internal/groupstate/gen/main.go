// Command gen writes the C header of the group state file
// (libgpuslice/include/gpuslice/shm.h) from the Go definitions in internal/groupstate.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

func main() {
	out := flag.String("o", groupstate.HeaderPath, "output file")
	flag.Parse()
	h, err := groupstate.CHeader()
	if err == nil {
		err = os.WriteFile(*out, h, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(1)
	}
}
