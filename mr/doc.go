// Package mr implements protection domains (PD) and memory regions (MR) for
// the sroce engine: key allocation, access flags, bounds checks, and the data
// movement the transport performs on registered memory (gather, scatter,
// remote read and write, atomics).
//
// # Objects
//
// A [Table] holds the PDs and MRs of one device. [Table.AllocPD] creates a
// [PD]; [PD.RegMR] and [PD.RegMRIOVA] register memory, given as a [Region],
// and return an [*MR] carrying an lkey and an rkey. A Region is anything that
// exposes its bytes: [Slice] wraps a Go slice, and memory mapped from another
// process (memfd) can implement the same interface.
//
// An MR covers the virtual range [IOVA, IOVA+Len) in the application's
// address space. By default the IOVA is the address of the region's first
// byte, as with ibv_reg_mr; [PD.RegMRIOVA] takes it explicitly, as
// ibv_reg_mr_iova does. Peers name remote memory by (rkey, virtual address),
// as in the RETH and AtomicETH headers.
//
// # Keys
//
// A key is 32 bits: the upper 24 bits name a slot of the table and the low 8
// bits are the slot's key byte. The slot number is passed through a keyed
// 24-bit permutation (a four-round Feistel network whose round keys come from
// the table's random source), so keys of successive registrations show no
// sequential pattern and one key says nothing useful about another.
//
// The key byte is drawn from crypto/rand whenever the table gives a slot a
// key: every registration, every [MR.Rereg] (not [MR.ReregKeepKey], which
// keeps the key as rdma_rxe does), every [PD.AllocMR] and
// [PD.AllocMW], and every key [FastMR.NewKey] and [MW.NewKey] propose. It is
// uniform over the 255 values that differ from the slot's previous key
// byte, so the key of the registration that replaces a stale key is never
// the stale key, and is unrelated to it: the index bits of the successor are
// those of the stale key, but a blind attacker holding the stale key needs
// on average 128 guesses (at most 255) to find the successor's key byte, and
// each wrong guess on an RC connection is a remote access error that moves
// the attacker's QP to the error state. A fresh registration in another
// slot costs about 2^31 guesses, the permutation hiding which index comes
// next. A key revoked two or more occupations of its slot ago is accepted
// again only if a later occupation draws its key byte again (probability
// 1/255 each time). Freed slots are reused first-in first-out and only once
// enough of them have accumulated, which spaces the occupations of a slot by
// many thousands of registrations. Key 0 is never issued.
//
// Keys chosen by the consumer are as predictable as the consumer makes them:
// the key of a REG_MR work request and the key byte of a type 2 window
// binding. The usual choice, [IncKey] (ib_inc_rkey, ibv_inc_rkey), lets a
// peer that saw one key predict the next; NewKey does not.
//
// An MR has a single key value, returned by both [MR.LKey] and [MR.RKey], as
// with rdma_rxe. Remote lookups by rkey succeed only if the MR was registered
// with at least one remote access flag.
//
// # Memory windows and fast-registration MRs
//
// A memory window ([MW], from [PD.AllocMW]) is a key that grants peers
// access to a range of an MR registered with [AccessMWBind], with rights of
// its own. A QP binds it ([PD.BindMW], a BIND_MW work request); type 1
// windows are unbound by a zero-length binding, type 2 windows by
// invalidation. A fast-registration MR ([FastMR], from [PD.AllocMR]) gets its
// memory and address from [FastMR.Map] and becomes valid, with a new key and
// access flags, by a REG_MR work request ([PD.RegFast]); an invalidation
// makes it free again. [PD.Invalidate] serves
// LOCAL_INV work requests and SEND with invalidate; it revokes only
// fast-registration MRs and type 2 windows, never an MR from RegMR or a type
// 1 window. A binding or a fast registration is published in its key's slot
// as an immutable MR, so lookups and data movement treat it like any other
// registration: a window's binding covers exactly the bound range and grants
// exactly the bound rights, and it is found only by remote accesses. The
// device gives each QP its own view of the QP's PD ([PD.ForQP]); a type 2
// window is bound to the view of the QP that bound it and reached only
// through it. An MR with windows bound cannot be deregistered,
// re-registered or invalidated (ErrWindowsBound).
//
// # Checks
//
// Every access checks, in order: the key (ErrBadKey), the protection domain
// (ErrPD), the access flags (ErrAccess), atomic alignment (ErrAlignment), and
// the bounds (ErrBounds). Errors are sentinel values, so failures do not
// allocate and callers test them with errors.Is. Bounds arithmetic is
// overflow safe: a range that wraps past 2^64 is out of bounds.
//
// A zero-length transfer touches no memory and succeeds without checking the
// key, PD, access or address. This follows IBTA C9-88 (a zero-length RDMA READ
// or WRITE need not carry a valid R_Key or VA) and rdma_rxe, which ignores
// zero-length SGEs. Lookups that return an MR ([PD.LookupLKey],
// [PD.LookupRKey]) always check the key, PD and access.
//
// # Concurrency
//
// Registration, re-registration, deregistration, window binding, fast
// registration and invalidation take a per-table mutex.
// Lookups take no lock: slots are atomic pointers to immutable MR objects
// (re-registration publishes a new MR in the same slot), so a lookup is an
// inverse permutation and two atomic loads.
//
// Data movement pins the MR for the duration of the copy with an atomic
// counter. [MR.Dereg] and [MR.Rereg] unpublish the MR, mark it dead so that no
// new pin succeeds, and wait for the pins already taken to drain. Hence once
// Dereg returns, no lookup by the old key succeeds and no byte of the old
// memory is read or written by this package, even by an engine that kept the
// *MR from an earlier lookup: its next call fails with ErrDeregistered.
//
// # Atomics
//
// [MR.CompareSwap] and [MR.FetchAdd] (and their [PD] counterparts taking an
// rkey) operate on an 8-byte aligned 64-bit word stored in host byte order,
// as rdma_rxe does; the engine converts from and to the big-endian AtomicETH
// and AtomicAckETH fields. They use sync/atomic and are therefore atomic with
// respect to each other, but not with respect to plain writes into the same
// memory. Both the virtual address and the backing memory address must be
// 8-byte aligned.
package mr
