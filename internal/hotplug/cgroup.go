package hotplug

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
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
// /proc/<pid>/cgroup contents: the v1 devices controller when it is mounted,
// else the v2 hierarchy.
func DeviceCgroup(m Mounts, procCgroup []byte) (Cgroup, error) {
	var v1, v2 string
	for _, line := range strings.Split(string(procCgroup), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2 = f[2]
		case contains(strings.Split(f[1], ","), "devices"):
			v1 = f[2]
		}
	}
	switch {
	case m.V1Devices != "" && v1 != "":
		return Cgroup{Dir: filepath.Join(m.V1Devices, v1)}, nil
	case m.V2 != "" && v2 != "":
		return Cgroup{V2: true, Dir: filepath.Join(m.V2, v2)}, nil
	}
	return Cgroup{}, fmt.Errorf("no device cgroup in %q (mounts %+v)", procCgroup, m)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CgroupOfPID returns the device cgroup of a running process.
func CgroupOfPID(m Mounts, procRoot string, pid int) (Cgroup, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return Cgroup{}, fmt.Errorf("cgroup of pid %d: %w", pid, err)
	}
	return DeviceCgroup(m, b)
}
