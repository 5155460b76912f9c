package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/output"
)

// readGroup reads a group's settings and the read-back files the daemon wrote.
func readGroup(tree group.Tree, name string) (GroupDoc, error) {
	d := GroupDoc{TypeMeta: output.Meta("Group"), Name: name, Settings: map[string]string{}, Status: map[string]string{}}
	s, err := tree.Read(name)
	if err != nil {
		return d, err
	}
	for _, f := range group.SettingFiles() {
		v, err := s.Format(f)
		if err != nil {
			return d, err
		}
		d.Settings[f] = v
	}
	for _, f := range group.ReadbackFiles() {
		v, err := tree.ReadFile(name, f)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return d, err
		default:
			d.Status[f] = v
		}
	}
	return d, nil
}

// writeGroups prints groups: as a GroupList (list) or one Group document, or
// as a table (default: ls's columns; wide: every setting and read-back file).
func writeGroups(w io.Writer, docs []GroupDoc, f output.Format, list bool) error {
	switch {
	case f.Structured() && list:
		return output.Write(w, f, GroupListDoc{TypeMeta: output.Meta("GroupList"), Items: docs})
	case f.Structured():
		return output.Write(w, f, docs[0])
	}
	cols := []string{group.FilePriority, group.FileSlice, group.FileShare, group.FileMemoryMax, group.FileMemoryCurrent}
	if f == output.Wide {
		cols = append(group.SettingFiles(), group.ReadbackFiles()...)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"GROUP"}
	for _, c := range cols {
		head = append(head, strings.ToUpper(c))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, d := range docs {
		if d.Error != "" {
			fmt.Fprintf(tw, "%s\t(%s)\n", d.Name, d.Error)
			continue
		}
		row := []string{d.Name}
		for _, c := range cols {
			v, ok := d.Settings[c]
			if !ok {
				v, ok = d.Status[c]
			}
			if !ok || v == "" {
				v = "-"
			}
			row = append(row, strings.ReplaceAll(v, "\n", "; "))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}
