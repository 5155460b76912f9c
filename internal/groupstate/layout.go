// Package groupstate owns a group's state file, gpu.state: where it lives,
// its layout (the shared-memory ABI between libgpuslice.so, which every
// member maps, and the node's Go processes), and every Go read or write of it.
// The layout is defined here, as Go structs; the C header the library builds
// against (libgpuslice/include/gpuslice/shm.h) is generated from them
// (`go generate ./internal/groupstate`; TestHeaderFresh and `make
// verify-generate` fail when it is stale). Readers accept every version in
// Versions (the header versions still in the field).
package groupstate

//go:generate go run ./gen -o ../../libgpuslice/include/gpuslice/shm.h

import (
	"path/filepath"
	"unsafe"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/paths"
)

// FileName is the state file's name in its group's directory.
const FileName = "gpu.state"

// Path is the state file of group name under runDir.
func Path(runDir, name string) string { return filepath.Join(paths.GroupDir(runDir, name), FileName) }

// ContainerDir is where a pod container sees its group's directory (read-only)
// and ContainerFile its state file: where it exists, it is the library's
// group file, whatever GPUSLICE_GROUP_FILE says. ContainerGateOff is the file
// (group.FileGateOff) by which the node says the container's launches are ungated.
const (
	ContainerDir     = "/run/gpuslice-group"
	ContainerFile    = ContainerDir + "/" + FileName
	ContainerGateOff = ContainerDir + "/" + group.FileGateOff
)

// ContainerDevicesDir holds, in a pod container of several groups (a
// container naming several DRA claims), one read-only directory per GPU, named
// by its UUID: the directory of the group of the claim that brought that GPU,
// with its state file writable (ContainerDeviceFile). A GPU with one is
// charged and gated to that group; a GPU without one to the container's group
// (ContainerFile). MaxContainerGroups bounds the groups one process holds (the
// library's table of groups; a container naming more claims is refused).
const (
	ContainerDevicesDir = "/run/gpuslice-groups"
	MaxContainerGroups  = 4
)

// ContainerDeviceDir is the group directory of GPU uuid in a container of
// several groups, and ContainerDeviceFile its state file.
func ContainerDeviceDir(uuid string) string { return ContainerDevicesDir + "/" + uuid }

// ContainerDeviceFile is the state file of GPU uuid's group in a container of
// several groups.
func ContainerDeviceFile(uuid string) string { return ContainerDeviceDir(uuid) + "/" + FileName }

// The layout's constants.
const (
	Magic    = 0x4543494c53555047 // "GPUSLICE" little endian
	Version  = 1                  // bump on any layout change, and keep the older ones in Versions
	MaxGPUs  = 16
	MaxProcs = 1024
	UUIDLen  = 64 // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL fits
	NameLen  = 64

	// ContextGuess is what a context is reserved at before any was
	// measured (the library's GS_DRV_CONTEXT_GUESS), and the most a
	// context seed (Header.ContextSeedKiB) may say.
	ContextGuess = 512 << 20

	// DeviceSeeds is how many kinds of device (by memory size) a header
	// holds a measured context size for (Header.DeviceSeedMiB/KiB).
	DeviceSeeds = 6
)

// Versions are the header versions readers accept (every one still in the field).
var Versions = []uint32{1}

// GPU slot states, elastic bits, process entry states.
//
// A process entry goes ProcFree -> ProcClaiming (a CAS by the member that
// takes it, holding the file's lock shared) -> ProcLive (stored last, release,
// once its fields are written). Claimers hold the lock shared, so they do not
// wait for one another; whoever holds it exclusively (a reap, an older
// library's claim, the daemon) sees no entry being filled in: an entry in
// ProcClaiming seen under the exclusive lock is one whose claimer died
// mid-claim, and is freed there (it holds no memory: memory is charged to live
// entries only). Readers without the lock treat ProcClaiming as not live.
// Older libraries and daemons read only ProcLive as live and claim only
// ProcFree, so the state needs no version change.
const (
	SlotFree     = 0
	SlotReady    = 2
	ElasticOn    = 1
	ElasticSpill = 2
	ProcFree     = 0
	ProcLive     = 1
	ProcClaiming = 2
)

// GPU is one GPU the group uses, keyed by its UUID string as NVML prints it
// (lower-case hex), so CUDA ordinals under CUDA_VISIBLE_DEVICES and NVML
// handles land on the same slot.
type GPU struct {
	State   uint32        `doc:"atomic; GS_SLOT_READY once uuid/limit are written"`
	Elastic uint32        `doc:"atomic; GS_ELASTIC_* bits (written by the time-slice daemon; 0: a plain limit)"`
	UUID    [UUIDLen]byte `doc:"the GPU's UUID string" c:"string" len:"GS_SHM_UUID_LEN"`
	Limit   uint64        `doc:"atomic; bytes, 0 = no limit (elastic: the allowance, min plus what the daemon lent)"`
	Used    uint64        `doc:"atomic; bytes the group holds now"`
	Peak    uint64        `doc:"atomic; highest used seen"`
	Refused uint64        `doc:"atomic; allocations refused at the limit"`
	Min     uint64        `doc:"atomic; elastic: the guarantee (memory.min)"`
	Managed uint64        `doc:"atomic; elastic: bytes allocated as managed memory past min (spillable)"`
	Spilled uint64        `doc:"atomic; elastic: bytes of those moved to host memory"`
}

// Proc is one process of the group (attached on its first allocation).
type Proc struct {
	State     uint32          `doc:"atomic; GS_PROC_LIVE while the entry is in use; GS_PROC_CLAIMING while a member fills it in (under the file lock shared)"`
	PID       int32           `doc:"pid in the process's own pid namespace"`
	HostPID   int32           `doc:"atomic; pid as the driver/NVML sees it; 0 = unknown yet (filled in by the time-slice daemon for another pid namespace)"`
	Guessing  uint32          `doc:"atomic; context creations of this process in flight whose reservation is a guess (no context measured on that GPU yet); written by the library (zero in files of older libraries)"`
	StartTime uint64          `doc:"/proc/<pid>/stat field 22: detects pid reuse"`
	PIDNS     uint64          `doc:"inode of /proc/<pid>/ns/pid"`
	Used      [MaxGPUs]uint64 `doc:"atomic; bytes per gpu[] slot" len:"GS_SHM_MAX_GPUS"`
}

// Header starts the file.
type Header struct {
	Magic      uint64 `doc:"GS_SHM_MAGIC, stored last at creation"`
	Version    uint32 `doc:"GS_SHM_VERSION"`
	HeaderSize uint32 `doc:"sizeof(struct gs_shm_header)"`
	FileSize   uint64 `doc:"GS_SHM_FILE_SIZE"`
	MaxGPUs    uint32 `doc:"GS_SHM_MAX_GPUS" cname:"max_gpus"`
	MaxProcs   uint32 `doc:"GS_SHM_MAX_PROCS"`
	GPUSize    uint32 `doc:"sizeof(struct gs_shm_gpu)"`
	ProcSize   uint32 `doc:"sizeof(struct gs_shm_proc)"`
	GPUOffset  uint64 `doc:"offsetof(struct gs_shm_file, gpu)"`
	ProcOffset uint64 `doc:"offsetof(struct gs_shm_file, proc)"`
	// The creator's pid namespace (the node's Go processes create the files of
	// pod containers): a member in it records host_pid = getpid(); others
	// leave 0 and say hello to the time-slice daemon, which fills it in.
	HostPIDNS uint64        `doc:"inode of the host pid namespace: the creator's"`
	Group     [NameLen]byte `doc:"GPUSLICE_GROUP of the creator" c:"string" len:"GS_SHM_NAME_LEN"`
	// The group's limit, written under the file lock by the time-slice daemon
	// alone. Once limit_set is 1, every GPU slot a member claims takes it,
	// whatever the member's own GPUSLICE_MEMORY_LIMIT says.
	Limit    uint64 `doc:"atomic; the group's limit in bytes (memory.max, or an elastic group's memory.min), 0 = no limit; written by the time-slice daemon only"`
	LimitSet uint32 `doc:"atomic; 1 once limit is written (stored after it); 0 (files made by the library alone): the member's GPUSLICE_MEMORY_LIMIT"`
	// What a context takes on this node, as the time-slice daemon alone
	// writes it (ContextSeed): a slot whose context_kib is still 0 is
	// reserved at this instead of the guess. Carved from a zero an older
	// library never read (no version change).
	ContextSeedKiB uint32 `doc:"atomic; 1 + the KiB a context took on this node (the largest any group measured, at most GS_SHM_CONTEXT_GUESS); 0 = none known; written by the time-slice daemon only" cname:"context_seed_kib"`
	// What a context took on each GPU, as the last member that made one there
	// measured it: the next creation is reserved at that size before the
	// driver is asked. Carved from zeros an older library never wrote or read:
	// such a file reads as nothing measured yet (no version change).
	ContextKiB [MaxGPUs]uint32 `doc:"atomic; per gpu[] slot: 1 + the KiB (rounded up) the driver took for the last context a member made there; 0 = none measured yet; written by the library" len:"GS_SHM_MAX_GPUS" cname:"context_kib"`
	// What a context takes on each kind of device of the node, measured by
	// the node itself (the time-slice daemon's context probe, a process of
	// its own, never a tenant's figure): entry i says a context on a device
	// whose driver reports DeviceSeedMiB[i] MiB of memory (cuDeviceTotalMem)
	// takes DeviceSeedKiB[i]. A context not yet measured in the group is
	// reserved at least at its device's entry, and no member's measurement
	// lowers that. Carved from zeros an older library never read (no
	// version change): such a file reads as no entry, and an older library
	// ignores them.
	DeviceSeedMiB [DeviceSeeds]uint32 `doc:"atomic; per entry: the device memory in MiB (cuDeviceTotalMem_v2 >> 20) of the kind of device it is for; 0 = a free entry; stored after its device_seed_kib, never changed once set; written by the time-slice daemon only" len:"GS_SHM_DEVICE_SEEDS" cname:"device_seed_mib"`
	DeviceSeedKiB [DeviceSeeds]uint32 `doc:"atomic; per entry: 1 + the KiB (rounded up) a context took on such a device, as the node's context probe measured it; 0 = none; written by the time-slice daemon only" len:"GS_SHM_DEVICE_SEEDS" cname:"device_seed_kib"`
}

// File is the whole state file.
type File struct {
	Hdr  Header
	GPU  [MaxGPUs]GPU
	Proc [MaxProcs]Proc
}

// Sizes and offsets, from the structs above (the C header asserts the same).
const (
	HeaderSize  = int(unsafe.Sizeof(Header{}))
	GPUSize     = int(unsafe.Sizeof(GPU{}))
	ProcSize    = int(unsafe.Sizeof(Proc{}))
	FileSize    = int(unsafe.Sizeof(File{}))
	GPUsOffset  = int(unsafe.Offsetof(File{}.GPU))
	ProcsOffset = int(unsafe.Offsetof(File{}.Proc))

	OffVersion    = int(unsafe.Offsetof(Header{}.Version))
	OffHeaderSize = int(unsafe.Offsetof(Header{}.HeaderSize))
	OffFileSize   = int(unsafe.Offsetof(Header{}.FileSize))
	OffMaxGPUs    = int(unsafe.Offsetof(Header{}.MaxGPUs))
	OffMaxProcs   = int(unsafe.Offsetof(Header{}.MaxProcs))
	OffGPUSize    = int(unsafe.Offsetof(Header{}.GPUSize))
	OffProcSize   = int(unsafe.Offsetof(Header{}.ProcSize))
	OffGPUOffset  = int(unsafe.Offsetof(Header{}.GPUOffset))
	OffProcOffset = int(unsafe.Offsetof(Header{}.ProcOffset))
	OffHostPIDNS  = int(unsafe.Offsetof(Header{}.HostPIDNS))
	OffGroup      = int(unsafe.Offsetof(Header{}.Group))
	OffLimit      = int(unsafe.Offsetof(Header{}.Limit))
	OffLimitSet   = int(unsafe.Offsetof(Header{}.LimitSet))
	OffSeed       = int(unsafe.Offsetof(Header{}.ContextSeedKiB))
	OffContextKiB = int(unsafe.Offsetof(Header{}.ContextKiB))
	OffDevSeedMiB = int(unsafe.Offsetof(Header{}.DeviceSeedMiB))
	OffDevSeedKiB = int(unsafe.Offsetof(Header{}.DeviceSeedKiB))

	GPUOffElastic = int(unsafe.Offsetof(GPU{}.Elastic))
	GPUOffUUID    = int(unsafe.Offsetof(GPU{}.UUID))
	GPUOffLimit   = int(unsafe.Offsetof(GPU{}.Limit))
	GPUOffUsed    = int(unsafe.Offsetof(GPU{}.Used))
	GPUOffPeak    = int(unsafe.Offsetof(GPU{}.Peak))
	GPUOffRefused = int(unsafe.Offsetof(GPU{}.Refused))
	GPUOffMin     = int(unsafe.Offsetof(GPU{}.Min))
	GPUOffManaged = int(unsafe.Offsetof(GPU{}.Managed))
	GPUOffSpilled = int(unsafe.Offsetof(GPU{}.Spilled))

	ProcOffPID     = int(unsafe.Offsetof(Proc{}.PID))
	ProcOffHostPID = int(unsafe.Offsetof(Proc{}.HostPID))
	ProcOffStart   = int(unsafe.Offsetof(Proc{}.StartTime))
	ProcOffPIDNS   = int(unsafe.Offsetof(Proc{}.PIDNS))
	ProcOffUsed    = int(unsafe.Offsetof(Proc{}.Used))
)
