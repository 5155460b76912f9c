package hotplug

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/systemd"
)

// Mounts are where the cgroup hierarchies that decide device access live.
type Mounts struct {
	// V1Devices is the mount point of the cgroup v1 devices controller
	// ("" when it is not mounted).
	V1Devices string
	// V2 is the mount point of the cgroup v2 (unified) hierarchy ("" if none).
	V2 string
}

// ParseMountinfo finds the cgroup mounts in a /proc/<pid>/mountinfo file
// (parsed by moby/sys/mountinfo; a malformed line is an error). The first
// mount of each kind wins.
func ParseMountinfo(b []byte) (Mounts, error) {
	infos, err := mountinfo.GetMountsFromReader(bytes.NewReader(b), mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return Mounts{}, fmt.Errorf("mountinfo: %w", err)
	}
	var m Mounts
	for _, i := range infos {
		switch i.FSType {
		case "cgroup2":
			if m.V2 == "" {
				m.V2 = i.Mountpoint
			}
		case "cgroup":
			for o := range strings.SplitSeq(i.VFSOptions, ",") {
				if o == "devices" && m.V1Devices == "" {
					m.V1Devices = i.Mountpoint
				}
			}
		}
	}
	return m, nil
}

// FindMounts reads the cgroup mounts of this process's mount namespace.
func FindMounts(procRoot string) (Mounts, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Mounts{}, fmt.Errorf("cgroup mounts: %w", err)
	}
	m, err := ParseMountinfo(b)
	if err != nil {
		return Mounts{}, fmt.Errorf("cgroup mounts: %w", err)
	}
	if m.V1Devices == "" && m.V2 == "" {
		return m, fmt.Errorf("cgroup mounts: neither a v1 devices controller nor cgroup v2 is mounted")
	}
	return m, nil
}

// Cgroup is where a process's device access is decided.
type Cgroup struct {
	// V2 is true for a cgroup v2 directory (an eBPF device program), false
	// for a v1 devices controller directory (devices.allow/deny).
	V2  bool
	Dir string
}

func (c Cgroup) String() string {
	if c.V2 {
		return "cgroup2:" + c.Dir
	}
	return "devices:" + c.Dir
}

// DeviceCgroup finds the device cgroup of a process from its
// /proc/<pid>/cgroup entries (opencontainers/cgroups' ParseCgroupFile: the
// controller, or "" for v2, to the path): the v1 devices controller when it is
// mounted, else the v2 hierarchy. The paths are relative to the reader's
// cgroup namespace.
func DeviceCgroup(m Mounts, procCgroup map[string]string) (Cgroup, error) {
	v1, v2 := procCgroup["devices"], procCgroup[""]
	switch {
	case m.V1Devices != "" && inNamespace(v1):
		return Cgroup{Dir: filepath.Join(m.V1Devices, v1)}, nil
	case m.V2 != "" && inNamespace(v2):
		return Cgroup{V2: true, Dir: filepath.Join(m.V2, v2)}, nil
	}
	return Cgroup{}, fmt.Errorf("no device cgroup in %q (mounts %+v; a path with \"..\" is outside this cgroup namespace)", procCgroup, m)
}

// inNamespace: an absolute cgroup path inside the reader's cgroup namespace
// (one outside it starts with "/..").
func inNamespace(p string) bool {
	return strings.HasPrefix(p, "/") && !slices.Contains(strings.Split(p, "/"), "..")
}

// CgroupOfPID returns the device cgroup of a running process.
func CgroupOfPID(m Mounts, procRoot string, pid int) (Cgroup, error) {
	entries, err := cgroups.ParseCgroupFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Cgroup{}, fmt.Errorf("cgroup of pid %d: %w", pid, err)
	}
	return DeviceCgroup(m, entries)
}

// SpecCgroupPath is the cgroup path (below a hierarchy's mount) of an OCI
// config's linux.cgroupsPath: "/a/b" for the cgroupfs driver, or the systemd
// driver's "slice:prefix:name" (the unit prefix-name.scope in the expanded
// slice, as runc places it, through opencontainers/cgroups/systemd).
func SpecCgroupPath(cgroupsPath string) (string, error) {
	if strings.HasPrefix(cgroupsPath, "/") {
		if p := filepath.Clean(cgroupsPath); p != "/" && !strings.Contains(cgroupsPath, "/../") && !strings.HasSuffix(cgroupsPath, "/..") {
			return p, nil
		}
		return "", fmt.Errorf("cgroups path %q", cgroupsPath)
	}
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 || parts[2] == "" || strings.ContainsAny(parts[1]+parts[2], "/") {
		return "", fmt.Errorf("cgroups path %q: want /path or slice:prefix:name", cgroupsPath)
	}
	slice := parts[0]
	if slice == "" {
		slice = "system.slice"
	}
	dir, err := systemd.ExpandSlice(slice)
	if err != nil {
		return "", fmt.Errorf("cgroups path %q: %w", cgroupsPath, err)
	}
	unit := parts[2]
	if !strings.HasSuffix(unit, ".slice") {
		unit = parts[1] + "-" + unit + ".scope"
	}
	return path.Join(dir, unit), nil
}

// ContainerCgroup is the device cgroup of a container from its OCI
// cgroupsPath (independent of the reader's cgroup namespace), checked with
// the kernel: pid must be one of its processes.
func ContainerCgroup(m Mounts, cgroupsPath string, pid int) (Cgroup, error) {
	p, err := SpecCgroupPath(cgroupsPath)
	if err != nil {
		return Cgroup{}, err
	}
	c := Cgroup{Dir: filepath.Join(m.V1Devices, p)}
	if m.V1Devices == "" {
		c = Cgroup{V2: true, Dir: filepath.Join(m.V2, p)}
	}
	procs, err := cgroups.GetPids(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return Cgroup{}, fmt.Errorf("%w: %s is gone", ErrNotMember, c)
	}
	if err != nil {
		return Cgroup{}, fmt.Errorf("%s: %w", c, err)
	}
	if !slices.Contains(procs, pid) {
		return Cgroup{}, fmt.Errorf("%w: pid %d is not in %s", ErrNotMember, pid, c)
	}
	return c, nil
}

// ErrNotMember wraps a process that is not in the cgroup it was said to be
// in (it exited, and its pid may have been reused).
var ErrNotMember = errors.New("process not in the cgroup")
