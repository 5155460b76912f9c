package hotplug

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/opencontainers/cgroups"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"
)

// Programs remembers, for each device rule list set on a cgroup v2
// directory, the tag (a hash of its instructions) of the
// BPF_PROG_TYPE_CGROUP_DEVICE program opencontainers/cgroups built for it.
// The library builds and attaches the program but neither exports it nor
// names it, so this is how a sync recognises that the program attached is
// already the wanted one and changes nothing. It holds at most max rule lists
// (then starts afresh); a restarted agent sets each list once more.
type Programs struct {
	mu   sync.Mutex
	max  int
	tags map[[sha256.Size]byte]string
}

// NewPrograms returns an empty cache of at most max rule lists.
func NewPrograms(max int) *Programs {
	return &Programs{max: max, tags: map[[sha256.Size]byte]string{}}
}

func (p *Programs) known(key [sha256.Size]byte, tag string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tags[key]
	return ok && t == tag
}

func (p *Programs) remember(key [sha256.Size]byte, tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.tags[key]; !ok && len(p.tags) >= p.max {
		clear(p.tags)
	}
	p.tags[key] = tag
}

// SyncV2 makes the device program of a cgroup v2 directory the one for
// Target(base, managed, want): base are the container's own device rules (its
// OCI config), needed because on cgroup v2 every attached program must allow
// an access, so adding a device means replacing the runtime's program whole.
// opencontainers/cgroups' v2 device setter builds the program (through its
// emulator, so the result decides as a v1 cgroup would), loads it, and
// replaces the attached one (BPF_F_REPLACE, or attach then detach every
// other). Nothing is loaded when exactly one program is attached and it is
// the one progs saw set for the same rules.
func SyncV2(progs *Programs, dir string, base []*devconfig.Rule, managed []devconfig.Device, want map[string]bool) (changed bool, err error) {
	if AllowsAll(base) {
		return false, fmt.Errorf("%s: %w", dir, ErrUnrestricted)
	}
	rules := Target(base, managed, want)
	key := sha256.Sum256([]byte(ruleList(rules)))
	tags, err := AttachedV2(dir)
	if err != nil {
		return false, err
	}
	if len(tags) == 1 && progs.known(key, tags[0]) {
		return false, nil
	}
	set := cgroups.DevicesSetV2
	if set == nil {
		return false, errors.New("opencontainers/cgroups: no v2 device setter registered")
	}
	if err := checkSet(rules); err != nil {
		return false, fmt.Errorf("%s: %w", dir, err)
	}
	if err := set(dir, &cgroups.Resources{Devices: rules}); err != nil {
		return true, fmt.Errorf("%s: set device program for:\n%s: %w", dir, ruleList(rules), err)
	}
	if tags, err = AttachedV2(dir); err != nil {
		return true, err
	}
	if len(tags) == 1 {
		progs.remember(key, tags[0])
	}
	return true, nil
}

// AttachedV2 lists the tags of the device programs attached to a cgroup v2
// directory itself.
func AttachedV2(dir string) ([]string, error) {
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	defer closeFD(cg)
	q, err := link.QueryPrograms(link.QueryOptions{Target: cg, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, fmt.Errorf("%s: query device programs: %w", dir, err)
	}
	out := make([]string, 0, len(q.Programs))
	for _, ap := range q.Programs {
		tag, err := programTag(ap.ID)
		if err != nil {
			return nil, fmt.Errorf("%s: device program %d: %w", dir, ap.ID, err)
		}
		out = append(out, tag)
	}
	return out, nil
}

func programTag(id ebpf.ProgramID) (string, error) {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return "", err
	}
	defer func() { _ = p.Close() }() // our reference only; the attachment keeps its own
	info, err := p.Info()
	if err != nil {
		return "", err
	}
	return info.Tag, nil
}
