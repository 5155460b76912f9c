// Command gen writes, from agent.NodeSettings, the node settings table of
// docs/node-agent.md (nodeconfig.SettingsTable), Config's fields
// (nodeconfig.ConfigSource) and the versioned file's types
// (nodeconfig.FileTypesSource).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuslice/gpuslice/internal/nodeconfig"
)

func main() {
	path := flag.String("doc", "../../docs/node-agent.md", "the document holding the table")
	root := flag.String("root", "../..", "the repository's root (where the Go files go)")
	flag.Parse()
	if err := run(*path, *root); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(path, root string) error {
	for file, src := range map[string]func() ([]byte, error){
		nodeconfig.ConfigFile:    nodeconfig.ConfigSource,
		nodeconfig.FileTypesFile: nodeconfig.FileTypesSource,
	} {
		b, err := src()
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(root, file), b, 0o644); err != nil {
			return err
		}
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := nodeconfig.ReplaceTable(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}
