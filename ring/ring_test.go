package ring

import (
	"github.com/sroce/sroce/mr"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/sroce/sroce/verbs"
)

func TestRingWrapAndFull(t *testing.T) {
	r, err := New[CQE](KindCQ, 5, Stride[CQE](0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Header().Size != 8 || r.Limit() != 5 || r.Stride() != 48 {
		t.Fatalf("size %d limit %d stride %d", r.Header().Size, r.Limit(), r.Stride())
	}
	var next, want uint64
	for round := 0; round < 20; round++ {
		for r.Push(&CQE{WRID: next}) {
			next++
		}
		if r.Len() != 5 {
			t.Fatalf("full ring holds %d", r.Len())
		}
		for k := 0; k < 3; k++ {
			e := r.Front()
			if e == nil || e.WRID != want {
				t.Fatalf("round %d: got %v, want wr_id %d", round, e, want)
			}
			r.Release(1)
			want++
		}
	}
}

func TestRingSGEs(t *testing.T) {
	r, err := New[RecvWQE](KindRecv, 4, Stride[RecvWQE](3*16))
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxSGEs() != 3 {
		t.Fatalf("%d SGEs fit, want 3", r.MaxSGEs())
	}
	for i := uint32(0); i < 4; i++ {
		s := r.Next()
		*s = RecvWQE{WRID: uint64(i), NumSGE: 3}
		sg := r.SGEs(r.Prod(), 3)
		for k := range sg {
			sg[k] = mr.SGE{Addr: uint64(i*10) + uint64(k), LKey: i}
		}
		r.Publish()
	}
	for i := uint32(0); i < 4; i++ {
		sg := r.SGEs(r.Cons(), int(r.Front().NumSGE))
		if sg[2].Addr != uint64(i*10+2) || sg[0].LKey != i {
			t.Fatalf("slot %d: %+v", i, sg)
		}
		r.Release(1)
	}
	if r.Front() != nil {
		t.Fatal("empty ring has an entry")
	}
}

func TestAttachChecks(t *testing.T) {
	mem := Alloc(Bytes(4, 48))
	if _, err := Attach[CQE](mem, KindCQ); err != ErrHeader {
		t.Fatalf("attach to zeroed memory: %v", err)
	}
	if _, err := Init[CQE](mem, KindCQ, 4, 48); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach[CQE](mem, KindSend); err != ErrHeader {
		t.Fatalf("attach with the wrong kind: %v", err)
	}
	if _, err := Attach[CQE](mem[:HeaderSize+100], KindCQ); err != ErrSize {
		t.Fatalf("attach to short memory: %v", err)
	}
	if _, err := Init[SendWQE](Alloc(Bytes(4, 64)), KindSend, 4, 64); err != ErrEntrySize {
		t.Fatalf("stride smaller than the entry: %v", err)
	}
	if _, err := Init[CQE](Alloc(Bytes(4, 48) + 1)[1:], KindCQ, 4, 48); err != ErrAlign {
		t.Fatalf("unaligned memory: %v", err)
	}
}

// TestRingConcurrent runs a producer and a consumer goroutine through many
// wraps; run with -race it checks the ordering the indices give.
func TestRingConcurrent(t *testing.T) {
	r, err := New[CQE](KindCQ, 16, Stride[CQE](0))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < n; {
			if r.Push(&CQE{WRID: i, ByteLen: uint32(i * 3)}) {
				i++
			}
		}
	}()
	for i := uint64(0); i < n; {
		e := r.Front()
		if e == nil {
			continue
		}
		if e.WRID != i || e.ByteLen != uint32(i*3) {
			t.Fatalf("entry %d: %+v", i, *e)
		}
		r.Release(1)
		i++
	}
	wg.Wait()
}

func TestCQERoundTrip(t *testing.T) {
	wc := verbs.WC{WRID: 7, Status: verbs.WCRemAccessErr, Opcode: verbs.WCRecvRDMAWithImm, VendorErr: 3,
		ByteLen: 4096, Imm: 0xdeadbeef, InvalidatedRKey: 0x1234, QPNum: 0x11, SrcQP: 0x22,
		Flags: verbs.WCWithImm | verbs.WCGRH, PKeyIndex: 1, SL: verbs.WCSLRoCEv2IPv4}
	var e CQE
	e.SetWC(&wc)
	var got verbs.WC
	e.WC(&got)
	if got != wc {
		t.Fatalf("%+v, want %+v", got, wc)
	}
}

// TestSharedMappingC maps a ring file into this process and into a C
// program built against sroce_ring.h: the C program produces completions
// with the header's helpers, Go consumes them through the same pages.
func TestSharedMappingC(t *testing.T) {
	exe := compileC(t, `#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "sroce_ring.h"
int main(int argc, char **argv) {
	int fd;
	struct stat st;
	struct sroce_ring_hdr *h;
	unsigned i;
	if (argc != 2 || (fd = open(argv[1], O_RDWR)) < 0 || fstat(fd, &st) < 0)
		return 2;
	h = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED || h->magic != SROCE_RING_MAGIC || h->kind != SROCE_RING_CQ)
		return 3;
	for (i = 0; i < 6; i++) {
		struct sroce_cqe *e = sroce_ring_next(h);
		if (!e)
			break;
		e->wr_id = 1000 + i;
		e->byte_len = i * 64;
		e->opcode = 128;
		e->qp_num = 0x11;
		sroce_ring_publish(h);
	}
	printf("%u\n", i);
	return 0;
}
`)
	path := filepath.Join(t.TempDir(), "cq.ring")
	size := Bytes(4, Stride[CQE](0))
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(mem)
	r, err := Init[CQE](mem, KindCQ, 4, Stride[CQE](0))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, path).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if string(out) != "4\n" {
		t.Fatalf("C produced %q entries into a ring of 4, want 4", out)
	}
	for i := 0; i < 4; i++ {
		e := r.Front()
		if e == nil {
			t.Fatalf("entry %d missing", i)
		}
		var wc verbs.WC
		e.WC(&wc)
		if wc.WRID != uint64(1000+i) || wc.ByteLen != uint32(i*64) || wc.Opcode != verbs.WCRecv || wc.QPNum != 0x11 {
			t.Fatalf("entry %d: %+v", i, wc)
		}
		r.Release(1)
	}
	if r.Front() != nil {
		t.Fatal("more entries than C produced")
	}
}

// TestCopyTo moves the unreleased entries of a ring that has wrapped into
// a larger one, tails included, and refuses a destination too small.
func TestCopyTo(t *testing.T) {
	src, err := New[RecvWQE](KindRecv, 4, Stride[RecvWQE](16))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 6; i++ { // wrap: two released, four waiting
		if i >= 4 {
			src.Release(1)
		}
		e := src.Next()
		*e = RecvWQE{WRID: i, NumSGE: 1}
		src.SGEs(src.Prod(), 1)[0].Addr = 100 + i
		src.Publish()
	}
	small, _ := New[RecvWQE](KindRecv, 3, Stride[RecvWQE](16))
	if src.CopyTo(small, src.Cons(), src.Len()) || small.Len() != 0 {
		t.Fatal("CopyTo filled a ring without room for the entries")
	}
	narrow, _ := New[RecvWQE](KindRecv, 8, Stride[RecvWQE](0))
	if src.CopyTo(narrow, src.Cons(), src.Len()) {
		t.Fatal("CopyTo filled a ring whose slots are smaller")
	}
	dst, _ := New[RecvWQE](KindRecv, 8, Stride[RecvWQE](16))
	if !src.CopyTo(dst, src.Cons(), src.Len()) {
		t.Fatal("CopyTo refused a ring with room")
	}
	if dst.Len() != 4 || src.Len() != 4 {
		t.Fatalf("lengths after CopyTo: dst %d src %d, want 4 and 4", dst.Len(), src.Len())
	}
	for k := uint32(0); k < 4; k++ {
		e := dst.Front()
		if e.WRID != uint64(k+2) || dst.SGEs(dst.Cons(), 1)[0].Addr != uint64(102+k) {
			t.Errorf("entry %d: wrid %d addr %d", k, e.WRID, dst.SGEs(dst.Cons(), 1)[0].Addr)
		}
		dst.Release(1)
	}
}

// TestProducerKeepsItsIndex has the consumer scribble over the producer
// index in shared memory: the producer goes on from its own.
func TestProducerKeepsItsIndex(t *testing.T) {
	r, err := New[CQE](KindCQ, 8, Stride[CQE](0))
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 3; i++ {
		r.Push(&CQE{WRID: i})
	}
	r.Header().Prod.Store(1000)
	if !r.Push(&CQE{WRID: 3}) {
		t.Fatal("push after the scribble: ring full")
	}
	if r.Produced() != 4 || r.Prod() != 4 || r.At(3).WRID != 3 {
		t.Errorf("after the scribble: produced %d, published %d, slot 3 holds %d", r.Produced(), r.Prod(), r.At(3).WRID)
	}
	// CopyTo moves the destination's own index too.
	d, _ := New[CQE](KindCQ, 8, Stride[CQE](0))
	d.Header().Prod.Store(77)
	if !r.CopyTo(d, 0, 4) || d.Produced() != 4 || d.Prod() != 4 || d.At(3).WRID != 3 {
		t.Errorf("CopyTo: produced %d, published %d", d.Produced(), d.Prod())
	}
}

// TestLoadCopies checks that Load, LoadTail and LoadSGEs copy, and never
// more than the slot holds.
func TestLoadCopies(t *testing.T) {
	r, err := New[SendWQE](KindSend, 4, Stride[SendWQE](2*16))
	if err != nil {
		t.Fatal(err)
	}
	s := r.Next()
	*s = SendWQE{WRID: 7, InlineLen: 9}
	copy(r.Tail(0), "inline data")
	r.Publish()
	var e SendWQE
	r.Load(0, &e)
	s.InlineLen = 0xffff
	if e.WRID != 7 || e.InlineLen != 9 {
		t.Errorf("Load: %+v", e)
	}
	b := make([]byte, 100)
	if n := r.LoadTail(0, b[:9]); n != 9 || string(b[:9]) != "inline da" {
		t.Errorf("LoadTail: %d %q", n, b[:n])
	}
	if n := r.LoadTail(0, b); n != r.TailLen() || r.TailLen() != 32 {
		t.Errorf("LoadTail of more than the tail: %d of %d", n, r.TailLen())
	}
	sg := make([]mr.SGE, 5)
	if n := r.LoadSGEs(0, sg); n != r.MaxSGEs() || n != 2 {
		t.Errorf("LoadSGEs of more than fit: %d", n)
	}
}
