package mr

import "runtime/debug"

// Registered memory can fault: memory shared with a file (a client's
// MAP_SHARED file, POSIX shm or hugetlbfs mapping, mapped into the daemon)
// raises SIGBUS past the file's end once the file is truncated under the
// mapping. The copies and atomics on MR memory turn such a fault into
// ErrAccess, the error a protection failure completes with, instead of a
// crash of the process that holds the mapping.

// memCopy is copy on MR memory, with a fault reported as ErrAccess.
func memCopy(dst, src []byte) (n int, err error) {
	defer faulted(debug.SetPanicOnFault(true), &err)
	return copy(dst, src), nil
}

// memAtomic runs an atomic operation on MR memory, with a fault reported
// as ErrAccess.
func memAtomic(op func() uint64) (v uint64, err error) {
	defer faulted(debug.SetPanicOnFault(true), &err)
	return op(), nil
}

// faulted, deferred, restores the goroutine's panic-on-fault setting to
// old and turns a memory fault's panic into ErrAccess in *err; any other
// panic goes on.
func faulted(old bool, err *error) {
	debug.SetPanicOnFault(old)
	if r := recover(); r != nil {
		if _, fault := r.(interface{ Addr() uintptr }); !fault {
			panic(r)
		}
		*err = ErrAccess
	}
}
