package mr

import (
	"errors"
	"strconv"
	"strings"
)

// Access is a set of MR access flags. The values are those of
// enum ibv_access_flags.
type Access uint32

const (
	// AccessLocalWrite lets the local engine write into the MR: receive
	// buffers, RDMA READ response targets and atomic result buffers
	// (IBV_ACCESS_LOCAL_WRITE).
	AccessLocalWrite Access = 1 << 0
	// AccessRemoteWrite lets peers write with RDMA WRITE
	// (IBV_ACCESS_REMOTE_WRITE). Requires AccessLocalWrite.
	AccessRemoteWrite Access = 1 << 1
	// AccessRemoteRead lets peers read with RDMA READ
	// (IBV_ACCESS_REMOTE_READ).
	AccessRemoteRead Access = 1 << 2
	// AccessRemoteAtomic lets peers perform atomic operations
	// (IBV_ACCESS_REMOTE_ATOMIC). Requires AccessLocalWrite.
	AccessRemoteAtomic Access = 1 << 3
	// AccessMWBind lets memory windows be bound to the MR
	// (IBV_ACCESS_MW_BIND).
	AccessMWBind Access = 1 << 4
	// AccessOnDemand asks for on-demand paging (IBV_ACCESS_ON_DEMAND).
	// sroce never pins what it registers, so every MR already behaves
	// so: the flag is accepted and changes nothing.
	AccessOnDemand Access = 1 << 6
)

const (
	accessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	accessAll    = AccessLocalWrite | accessRemote | AccessMWBind | AccessOnDemand
)

// valid reports whether a is a permitted registration access set: no unknown
// bits, and remote write or atomic only together with local write.
func (a Access) valid() bool {
	if a&^accessAll != 0 {
		return false
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return false
	}
	return true
}

// String returns the flags in verbs spelling, such as
// "LOCAL_WRITE|REMOTE_READ", or "0" for the empty set.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b strings.Builder
	names := [...]string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "MW_BIND", "", "ON_DEMAND"}
	for i, n := range names {
		if a&(1<<i) != 0 && n != "" {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n)
		}
	}
	if rest := a &^ accessAll; rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}

// ReregFlags selects what [MR.Rereg] changes. The values are those of
// enum ibv_rereg_mr_flags.
type ReregFlags uint32

const (
	// ReregChangeTranslation replaces the memory and IOVA
	// (IBV_REREG_MR_CHANGE_TRANSLATION).
	ReregChangeTranslation ReregFlags = 1 << 0
	// ReregChangePD moves the MR to another PD of the same table
	// (IBV_REREG_MR_CHANGE_PD).
	ReregChangePD ReregFlags = 1 << 1
	// ReregChangeAccess replaces the access flags
	// (IBV_REREG_MR_CHANGE_ACCESS).
	ReregChangeAccess ReregFlags = 1 << 2

	reregAll = ReregChangeTranslation | ReregChangePD | ReregChangeAccess
)

// Errors returned by this package. They are distinct sentinel values so that
// the engine can map them to NAK codes and work completion statuses with
// errors.Is, and so that failures do not allocate.
var (
	// ErrBadKey means no MR is registered under the key, including keys
	// made stale by Dereg or Rereg.
	ErrBadKey = errors.New("mr: invalid key")
	// ErrPD means the MR belongs to another protection domain.
	ErrPD = errors.New("mr: protection domain mismatch")
	// ErrAccess means the MR lacks an access flag the operation needs.
	ErrAccess = errors.New("mr: access not permitted")
	// ErrBounds means the range is not inside the MR.
	ErrBounds = errors.New("mr: range out of bounds")
	// ErrAlignment means an atomic operation's address is not 8-byte
	// aligned.
	ErrAlignment = errors.New("mr: misaligned atomic address")
	// ErrDeregistered means the *MR was deregistered or re-registered.
	ErrDeregistered = errors.New("mr: memory region deregistered")
	// ErrLength means the SGE list is shorter than the data to transfer.
	ErrLength = errors.New("mr: SGE list too short")
	// ErrBusy means the PD still has registered MRs (EBUSY).
	ErrBusy = errors.New("mr: protection domain in use")
	// ErrInvalid means invalid registration arguments, or an operation on
	// a deallocated PD (EINVAL).
	ErrInvalid = errors.New("mr: invalid argument")
	// ErrNoResources means the table has no free MR slot (ENOMEM).
	ErrNoResources = errors.New("mr: out of memory region slots")
	// ErrNotInvalidatable means a key names a memory region or window
	// that no invalidation may revoke: an MR registered with RegMR, a
	// type 1 memory window, or (for a remote invalidation) a
	// fast-registration MR without remote access.
	ErrNotInvalidatable = errors.New("mr: key cannot be invalidated")
	// ErrNotFree means a REG_MR names a fast-registration MR that is still
	// registered, or a BIND_MW a type 2 window that is still bound: it
	// must be invalidated first.
	ErrNotFree = errors.New("mr: fast-registration MR or type 2 window is still valid")
	// ErrWindowsBound means memory windows are still bound to the MR, which
	// can therefore not be deregistered, re-registered or invalidated.
	ErrWindowsBound = errors.New("mr: memory windows are bound to the region")
)
