package hotplug

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
)

// gridNodes are the devices the semantics tests open inside the helper:
// char and block, two majors and two minors with no driver behind them here
// (an allowed open gives ENXIO), and /dev/null.
func gridNodes() []devconfig.Device {
	var out []devconfig.Device
	for _, ty := range []devconfig.Type{devconfig.CharDevice, devconfig.BlockDevice} {
		for _, major := range []int64{195, 196} {
			for _, minor := range []int64{0, 1} {
				out = append(out, devconfig.Device{Path: fmt.Sprintf("/dev/%c%d_%d", ty, major, minor), FileMode: 0o666,
					Rule: devconfig.Rule{Type: ty, Major: major, Minor: minor, Permissions: "rw"}})
			}
		}
	}
	return append(out, devconfig.Device{Path: "/dev/null", FileMode: 0o666,
		Rule: devconfig.Rule{Type: devconfig.CharDevice, Major: 1, Minor: 3, Permissions: "rw"}})
}

// rulesOf reads "allow c 195:0 rw" / "deny a" lines.
func rulesOf(t testing.TB, lines ...string) []*devconfig.Rule {
	t.Helper()
	var out []*devconfig.Rule
	for _, l := range lines {
		verb, rest, _ := strings.Cut(l, " ")
		if rest == "a" {
			rest = "a *:* rwm"
		}
		r, err := parseListLine(rest)
		if err != nil {
			t.Fatal(err)
		}
		r.Allow = verb == "allow"
		out = append(out, r)
	}
	return out
}

// cgroupPeer is a helper process in a fresh device cgroup (v1 devices or v2)
// with the grid's nodes in its /dev.
type cgroupPeer struct {
	h   *helper
	v2  bool
	dir string
}

func newPeer(t *testing.T, v2 bool) *cgroupPeer {
	t.Helper()
	m, err := FindMounts("/proc")
	parent := m.V1Devices
	if v2 {
		parent = m.V2
	}
	if err != nil || parent == "" {
		t.Skipf("no cgroup hierarchy for v2=%v here (%+v, %v)", v2, m, err)
	}
	h := startHelper(t)
	p := &cgroupPeer{h: h, v2: v2, dir: newCgroup(t, parent, h.cmd.Process.Pid)}
	want := map[string]bool{}
	for _, d := range gridNodes() {
		want[d.Path] = true
	}
	if _, err := SyncNodes("/proc", h.cmd.Process.Pid, gridNodes(), want); err != nil {
		t.Fatal(err)
	}
	return p
}

// set applies rules with the library's setter itself (no refusal of ours).
func (p *cgroupPeer) set(rules []*devconfig.Rule) error {
	if p.v2 {
		return cgroups.DevicesSetV2(p.dir, &cgroups.Resources{Devices: rules})
	}
	return cgroups.DevicesSetV1(p.dir, &cgroups.Resources{Devices: rules})
}

// access reports what read and write opens of every grid node give.
func (p *cgroupPeer) access() map[string]string {
	out := map[string]string{}
	for _, d := range gridNodes() {
		for _, verb := range []string{"read", "write"} {
			out[verb+" "+d.Path] = p.h.ask(verb, d.Path)
		}
	}
	return out
}

// The kernel's devices semantics (security/device_cgroup.c), rule list by
// rule list, as the library's v1 setter and its v2 program give them: ok
// and ENXIO are allowed, EPERM denied.
func TestDeviceRuleSemantics(t *testing.T) {
	needRoot(t)
	cases := []struct {
		name  string
		rules []string
		want  map[string]string // "read /dev/c195_0": errno
		err   string            // the library refuses the list
	}{
		{"deny-all denies", []string{"deny a"}, map[string]string{"read /dev/c195_0": "EPERM", "write /dev/null": "EPERM"}, ""},
		{"allow exact", []string{"allow c 195:0 rw"}, map[string]string{"read /dev/c195_0": "ENXIO", "write /dev/c195_0": "ENXIO", "read /dev/c195_1": "EPERM"}, ""},
		{"allow covers its bits only", []string{"allow c 195:0 r"}, map[string]string{"read /dev/c195_0": "ENXIO", "write /dev/c195_0": "EPERM"}, ""},
		{"bits merge", []string{"allow c 195:0 r", "allow c 195:0 w"}, map[string]string{"read /dev/c195_0": "ENXIO", "write /dev/c195_0": "ENXIO"}, ""},
		{"deny removes bits", []string{"allow c 195:0 rwm", "deny c 195:0 w"}, map[string]string{"read /dev/c195_0": "ENXIO", "write /dev/c195_0": "EPERM"}, ""},
		{"deny removes entry", []string{"allow c 1:3 r", "allow c 195:0 rw", "deny c 195:0 rwm"}, map[string]string{"read /dev/c195_0": "EPERM"}, ""},
		{"no hole in a wildcard", []string{"allow c 195:* rw", "deny c 195:1 rw"}, nil, "punch hole"},
		{"wildcard minor", []string{"allow c 195:* rw"}, map[string]string{"read /dev/c195_1": "ENXIO", "read /dev/c196_1": "EPERM", "read /dev/b195_1": "EPERM"}, ""},
		{"wildcard major", []string{"allow b *:1 r"}, map[string]string{"read /dev/b196_1": "ENXIO", "read /dev/b196_0": "EPERM", "read /dev/c196_1": "EPERM"}, ""},
		{"a resets to allow", []string{"allow c 195:0 r", "allow a"}, map[string]string{"write /dev/c195_1": "ENXIO", "write /dev/null": "ok"}, ""},
		{"a resets to deny", []string{"allow a", "deny c 1:3 w", "deny a", "allow c 1:3 rwm"}, map[string]string{"read /dev/c195_0": "EPERM", "write /dev/null": "ok"}, ""},
		{"allow-all denies its exception", []string{"allow a", "deny c 195:1 w"}, map[string]string{"write /dev/c195_1": "EPERM", "read /dev/c195_1": "ENXIO", "write /dev/c195_0": "ENXIO"}, ""},
		{"allow-all: allow removes a deny", []string{"allow a", "deny c 195:1 rw", "allow c 195:1 rw"}, map[string]string{"read /dev/c195_1": "ENXIO"}, ""},
		{"block is not char", []string{"allow b 195:0 rw"}, map[string]string{"read /dev/c195_0": "EPERM", "read /dev/b195_0": "ENXIO"}, ""},
		{"runc's mknod wildcard keeps GPU denials whole", []string{"deny a", "allow c *:* m", "allow c 195:0 rw", "deny c 195:0 rw", "allow c 195:1 rw"},
			map[string]string{"read /dev/c195_0": "EPERM", "read /dev/c195_1": "ENXIO"}, ""},
	}
	for _, v2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			p := newPeer(t, v2)
			for _, tc := range cases {
				err := p.set(rulesOf(t, tc.rules...))
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				for op, want := range tc.want {
					verb, path, _ := strings.Cut(op, " ")
					if got := p.h.ask(verb, path); got != want {
						t.Errorf("%s: %s = %s, want %s", tc.name, op, got, want)
					}
				}
			}
		})
	}
}

func randomRules(rng *rand.Rand) []*devconfig.Rule {
	num := func(a, b int64) int64 {
		return []int64{a, b, devconfig.Wildcard}[rng.IntN(3)]
	}
	var out []*devconfig.Rule
	if rng.IntN(3) == 0 {
		out = append(out, &devconfig.Rule{Type: devconfig.WildcardDevice, Major: -1, Minor: -1, Permissions: "rwm", Allow: rng.IntN(2) == 0})
	}
	for range rng.IntN(7) {
		out = append(out, &devconfig.Rule{
			Type:        []devconfig.Type{devconfig.CharDevice, devconfig.BlockDevice}[rng.IntN(2)],
			Major:       num(195, 196),
			Minor:       num(0, 1),
			Permissions: []devconfig.Permissions{"r", "w", "m", "rw", "rm", "wm", "rwm"}[rng.IntN(7)],
			Allow:       rng.IntN(3) != 0,
		})
	}
	// The library's v1 setter reports a mismatch when it empties a cgroup
	// that had exceptions (its final check compares a nil and an empty
	// map), so every list ends with an exception.
	return append(out, &devconfig.Rule{Type: devconfig.CharDevice, Major: 1, Minor: 3, Permissions: "r", Allow: true})
}

// The library's v2 program decides every access exactly as the kernel's v1
// devices controller does after the library's v1 setter applied the same
// rules (both refuse the same lists), for random rule lists; and the v1
// setter reaches each state from the one before (it checks devices.list).
func TestV2ProgramDecidesLikeV1(t *testing.T) {
	needRoot(t)
	v1, v2 := newPeer(t, false), newPeer(t, true)
	rng := rand.New(rand.NewPCG(3, 4))
	applied := 0
	for i := range 200 {
		rules := randomRules(rng)
		e1, e2 := v1.set(rules), v2.set(rules)
		if (e1 == nil) != (e2 == nil) {
			t.Fatalf("case %d %q: v1 err %v, v2 err %v", i, ruleList(rules), e1, e2)
		}
		if e1 != nil {
			continue
		}
		applied++
		a1, a2 := v1.access(), v2.access()
		for op, want := range a1 {
			if a2[op] != want {
				t.Errorf("case %d %q: %s: v1 %s, v2 %s", i, ruleList(rules), op, want, a2[op])
			}
		}
	}
	if applied < 100 {
		t.Fatalf("only %d of 200 random lists applied", applied)
	}
}
