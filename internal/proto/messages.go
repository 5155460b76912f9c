package proto

// The messages. Every field is a fixed-size integer or byte array, little-endian
// on the wire, laid out without padding (each field naturally aligned). The C
// header include/gpuslice/proto.h is generated from these definitions: change
// them here, bump Version when the layout changes, and run `go generate`.
// Tags: `doc` is copied into the header; `c:"string"` makes a byte array a
// NUL-padded char array.

// Hello is the client's first message on a new connection.
type Hello struct {
	Features uint32 `doc:"GS_FEATURE_* bits the client understands"`
	Reserved uint32 `doc:"zero"`
}

// Welcome answers Hello: the daemon accepted the client into a group.
type Welcome struct {
	Features uint32   `doc:"GS_FEATURE_* bits both sides understand"`
	Reserved uint32   `doc:"zero"`
	PeriodNs uint64   `doc:"the scheduling period, informational"`
	Group    [64]byte `doc:"the group the daemon placed the caller in" c:"string"`
}

// Acquire asks for the GPU: the client has work to launch.
type Acquire struct {
	GPU      UUID   `doc:"the GPU, as the 16 bytes of cuDeviceGetUuid"`
	Flags    uint32 `doc:"zero"`
	Reserved uint32 `doc:"zero"`
}

// Grant gives the client the GPU for ValidNs from when the daemon sent it.
type Grant struct {
	GPU      UUID   `doc:"the GPU"`
	Seq      uint64 `doc:"grant number, echoed by Release; revokes name it too"`
	SliceNs  uint64 `doc:"the group's own slice; time past it is borrowed from its burst buffer"`
	ValidNs  uint64 `doc:"the grant ends this long after it was sent"`
	Flags    uint32 `doc:"GS_GRANT_* bits"`
	Reserved uint32 `doc:"zero"`
}

// Release hands the GPU back after the client's outstanding work finished.
type Release struct {
	GPU      UUID   `doc:"the GPU"`
	Seq      uint64 `doc:"the grant released"`
	Flags    uint32 `doc:"GS_RELEASE_* bits"`
	Reserved uint32 `doc:"zero"`
}

// Revoke tells the holder to finish its outstanding work and release now.
type Revoke struct {
	GPU      UUID   `doc:"the GPU"`
	Seq      uint64 `doc:"the grant revoked"`
	Reason   uint32 `doc:"GS_REVOKE_* value"`
	Reserved uint32 `doc:"zero"`
}

// Error reports a refused request; the daemon closes the connection after it.
type Error struct {
	Code     uint32   `doc:"GS_ERR_* value"`
	Reserved uint32   `doc:"zero"`
	Message  [96]byte `doc:"one line, NUL-padded" c:"string"`
}

// Type returns the message's type code.
func (*Hello) Type() Type { return TypeHello }

// Type returns the message's type code.
func (*Welcome) Type() Type { return TypeWelcome }

// Type returns the message's type code.
func (*Acquire) Type() Type { return TypeAcquire }

// Type returns the message's type code.
func (*Grant) Type() Type { return TypeGrant }

// Type returns the message's type code.
func (*Release) Type() Type { return TypeRelease }

// Type returns the message's type code.
func (*Revoke) Type() Type { return TypeRevoke }

// Type returns the message's type code.
func (*Error) Type() Type { return TypeError }
