package cli

import (
	"strings"
	"testing"
)

// FuzzLegacyDashes: the rewrite only ever adds a dash to a single-dash flag
// token; it never drops, adds or reorders arguments, and never touches
// anything after a "--" that ends the flags (one that is not a flag's value,
// as in `-memory --`, which the flag parsers read as the value "--").
func FuzzLegacyDashes(f *testing.F) {
	for _, s := range []string{"run\x00-memory\x001G\x00--\x00-memory", "group\x00-run-dir\x00/r\x00set\x00g\x00slice=1ms",
		"node\x00-v\x003\x00-idle-exit=1s", "run\x00app\x00-x", "-version", "smi\x00-o\x00json", "\x00-\x00--\x00---"} {
		f.Add(s)
	}
	env := &Env{Getenv: func(string) string { return "" }}
	root := NewRootCommand(env)
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		got := legacyDashes(root, args)
		if len(got) != len(args) {
			t.Fatalf("%q -> %q: length changed", args, got)
		}
		dash := -1
		for d, a := range args {
			if a == "--" && (d == 0 || !strings.HasPrefix(args[d-1], "-")) {
				dash = d
				break
			}
		}
		for i := range args {
			switch {
			case got[i] == args[i]:
			case dash >= 0 && i > dash:
				t.Fatalf("%q -> %q: argument %d after -- rewritten", args, got, i)
			case got[i] != "-"+args[i] || strings.HasPrefix(args[i], "--") || !strings.HasPrefix(args[i], "-"):
				t.Fatalf("%q -> %q: argument %d rewritten to %q", args, got, i, got[i])
			}
		}
	})
}
