package mr_test

import (
	"errors"
	"fmt"

	"github.com/sroce/sroce/mr"
)

// Register a buffer for remote writes, serve an RDMA WRITE and an atomic the
// way the responder does, and deregister.
func Example() {
	tab := mr.NewTable(mr.Options{}) // one per device
	pd := tab.AllocPD()

	mem := make([]byte, 64)
	m, err := pd.RegMRIOVA(mr.Slice(mem), 0x10000, mr.AccessLocalWrite|mr.AccessRemoteWrite)
	if err != nil {
		panic(err)
	}

	// A peer sends RETH{va: 0x10000+4, rkey, dmalen: 5}, then the payload.
	if err := pd.CheckRemote(m.RKey(), 0x10004, 5, mr.AccessRemoteWrite); err != nil {
		panic(err)
	}
	if err := pd.WriteRemote(m.RKey(), 0x10004, []byte("hello")); err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", mem[4:9])

	// The MR was not registered for remote reads or atomics.
	err = pd.ReadRemote(m.RKey(), 0x10004, make([]byte, 5))
	fmt.Println(errors.Is(err, mr.ErrAccess))
	_, err = pd.FetchAdd(m.RKey(), 0x10008, 1)
	fmt.Println(errors.Is(err, mr.ErrAccess))

	// Past the end of the MR.
	err = pd.WriteRemote(m.RKey(), 0x10000+60, []byte("hello"))
	fmt.Println(errors.Is(err, mr.ErrBounds))

	// A PD with MRs cannot be deallocated; after Dereg the key is dead.
	fmt.Println(errors.Is(pd.Dealloc(), mr.ErrBusy))
	if err := m.Dereg(); err != nil {
		panic(err)
	}
	err = pd.WriteRemote(m.RKey(), 0x10004, []byte("hello"))
	fmt.Println(errors.Is(err, mr.ErrBadKey))
	fmt.Println(pd.Dealloc())

	// Output:
	// "hello"
	// true
	// true
	// true
	// true
	// true
	// <nil>
}

// Local memory is described by SGE lists: the requester gathers a send
// payload from them, the responder scatters a received one into them.
func ExamplePD_Gather() {
	tab := mr.NewTable(mr.Options{})
	pd := tab.AllocPD()

	hdr, body := []byte("HDR:"), []byte("payload")
	mh, _ := pd.RegMR(mr.Slice(hdr), 0)
	mb, _ := pd.RegMR(mr.Slice(body), 0)
	send := []mr.SGE{
		{Addr: mr.AddrOf(hdr), Length: uint32(len(hdr)), LKey: mh.LKey()},
		{Addr: mr.AddrOf(body), Length: uint32(len(body)), LKey: mb.LKey()},
	}

	recvBuf := make([]byte, 32)
	mr2, _ := pd.RegMR(mr.Slice(recvBuf), mr.AccessLocalWrite)
	recv := []mr.SGE{{Addr: mr2.IOVA(), Length: 32, LKey: mr2.LKey()}}

	// Two packets with a 6-byte MTU.
	pkt := make([]byte, 6)
	for off := uint64(0); off < 11; off += 6 {
		n, _ := pd.Gather(send, off, pkt[:min(6, 11-off)])
		if _, err := pd.Scatter(recv, off, pkt[:n]); err != nil {
			panic(err)
		}
	}
	fmt.Printf("%s\n", recvBuf[:11])
	// Output: HDR:payload
}
