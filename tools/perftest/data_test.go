package perftest

// The data patterns and checks of the perftest tools on hand-made buffers:
// a sroce peer's data is checked to the byte, another implementation's is
// left alone, and damage is reported.

import (
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/tools/oob"
)

// TestPatternFill checks that any slice of a pattern is the same bytes,
// wherever it starts.
func TestPatternFill(t *testing.T) {
	const seed = 0x1234
	whole := make([]byte, 300)
	fillPattern(whole, seed, 0)
	for _, off := range []int{0, 1, 7, 8, 13, 64, 255} {
		for _, n := range []int{0, 1, 5, 8, 9, 40} {
			if off+n > len(whole) {
				continue
			}
			part := make([]byte, n)
			fillPattern(part, seed, off)
			if string(part) != string(whole[off:off+n]) {
				t.Errorf("bytes %d..%d differ from the whole pattern", off, off+n)
			}
			if j := patternMismatch(whole[off:off+n], seed, off); j != -1 {
				t.Errorf("patternMismatch at %d+%d: %d", off, n, j)
			}
		}
	}
	other := make([]byte, 300)
	fillPattern(other, seed+1, 0)
	if string(other[:16]) == string(whole[:16]) {
		t.Error("two seeds give the same pattern")
	}
	whole[200] ^= 1
	if j := patternMismatch(whole, seed, 0); j != 200 {
		t.Errorf("patternMismatch = %d, want 200", j)
	}
	a := oob.KeyMsg{QPN: 17, PSN: 1, RKey: 5}
	b := a
	b.PSN = 2
	if keySeed(a) == keySeed(b) {
		t.Error("key messages that differ in the PSN give the same seed")
	}
}

// testPerftest returns a perftest run with one QP, its buffers filled,
// and a peer whose key message is peer, as if connected.
func testPerftest(t *testing.T, test oob.Test, args []string, peer oob.KeyMsg) *perftest {
	t.Helper()
	p, err := oob.ParsePerftest(test, args)
	if err != nil {
		t.Fatal(err)
	}
	router := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
	dev, err := roce.Open(router.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 1500), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pt := &perftest{toolRun: &toolRun{h: &localHCA{Device: rdma.InProcess(dev), dev: dev}}, p: p, test: test, verb: test.Verb(), cycle: 4096, cache: 64}
	pt.area = pt.roundCache(max(int(p.Size), pt.cycle))
	pt.buf = make([]byte, 2*pt.area)
	pt.qps = make([]rdma.QP, 1)
	pt.local = []oob.KeyMsg{{QPN: 17, PSN: 0x777, RKey: 0x1000}}
	pt.fillBuffers()
	pt.peer = []oob.KeyMsg{peer}
	pt.check.start(pt)
	return pt
}

// TestCheckWriteTarget checks the WRITE target check: a sroce writer's
// slots are verified, damage is found, a foreign writer is left alone.
func TestCheckWriteTarget(t *testing.T) {
	peer := oob.KeyMsg{QPN: 18, PSN: 0x999, RKey: 0x2000}
	const size = 100
	write := func(pt *perftest) {
		inc := pt.incr(size)
		for _, k := range pt.writtenSlots(size, 1000) {
			fillPattern(pt.buf[pt.regionOff(0)+k*inc:pt.regionOff(0)+k*inc+size], keySeed(peer), k*inc)
		}
	}
	pt := testPerftest(t, oob.WriteBW, []string{"-s", "100"}, peer)
	write(pt)
	pt.checkWriteTarget(size, 1000)
	if pt.check.err != nil || pt.check.bytes != uint64(pt.slots(size)*size) || pt.check.seen[0] != peerSroce {
		t.Errorf("clean writes: err %v, %d bytes checked, peer %d", pt.check.err, pt.check.bytes, pt.check.seen[0])
	}

	pt = testPerftest(t, oob.WriteBW, []string{"-s", "100"}, peer)
	write(pt)
	pt.buf[pt.regionOff(0)+5*pt.incr(size)+50] ^= 0x40
	pt.checkWriteTarget(size, 1000)
	if pt.check.err == nil || !strings.Contains(pt.check.err.Error(), "byte 690 of the written region") {
		t.Errorf("damaged write: err %v", pt.check.err)
	}

	// Nothing written: the region still holds this side's own pattern,
	// which is not the peer's, so the peer counts as foreign.
	pt = testPerftest(t, oob.WriteBW, []string{"-s", "100"}, peer)
	pt.checkWriteTarget(size, 1000)
	if pt.check.err != nil || pt.check.bytes != 0 || pt.check.seen[0] != peerForeign {
		t.Errorf("foreign writer: err %v, %d bytes, peer %d", pt.check.err, pt.check.bytes, pt.check.seen[0])
	}
	// UC: the first WRITE was dropped (its slot keeps this side's own
	// pattern); the others are still checked against the peer's.
	pt = testPerftest(t, oob.WriteBW, []string{"-s", "100", "-c", "UC"}, peer)
	write(pt)
	first := pt.writtenSlots(size, 1000)[0]
	off := pt.regionOff(0) + first*pt.incr(size)
	fillPattern(pt.buf[off:off+size], keySeed(pt.local[0]), first*pt.incr(size))
	pt.checkWriteTarget(size, 1000)
	if pt.check.err != nil || pt.check.lost != 1 || pt.check.bytes != uint64((pt.slots(size)-1)*size) || pt.check.seen[0] != peerSroce {
		t.Errorf("UC with a dropped WRITE: err %v, %d lost, %d bytes checked, peer %d",
			pt.check.err, pt.check.lost, pt.check.bytes, pt.check.seen[0])
	}
}

// TestCheckAtomics checks the atomic checks of both sides.
func TestCheckAtomics(t *testing.T) {
	peer := oob.KeyMsg{QPN: 18, PSN: 0x999, RKey: 0x2000}
	first := func(k int) uint64 {
		var b [8]byte
		fillPattern(b[:], keySeed(peer), k*64)
		return binary.NativeEndian.Uint64(b[:])
	}
	// The requester: FETCH_ADD results go up by one per visit of a slot.
	pt := testPerftest(t, oob.AtomicBW, nil, peer)
	for s := 0; s < 200; s++ {
		k := s % 64
		pt.checkAtomicResult(0, k, first(k)+uint64(s/64))
	}
	if pt.check.err != nil || pt.check.atomics != 200 || pt.check.seen[0] != peerSroce {
		t.Errorf("fetch-add results: err %v, %d checked", pt.check.err, pt.check.atomics)
	}
	pt.checkAtomicResult(0, 3, first(3)+7)
	if pt.check.err == nil {
		t.Error("a skipped value went unnoticed")
	}
	// Against another implementation only the increments are checked.
	pt = testPerftest(t, oob.AtomicBW, []string{"-A", "CMP_AND_SWAP"}, peer)
	pt.checkAtomicResult(0, 0, 42)
	pt.checkAtomicResult(0, 0, 42)
	if pt.check.err != nil || pt.check.seen[0] != peerForeign || pt.check.atomics != 1 {
		t.Errorf("foreign compare-swap: err %v, peer %d, %d checked", pt.check.err, pt.check.seen[0], pt.check.atomics)
	}

	// The owner: after 130 FETCH_ADDs slots 0 and 1 went up by 3, the
	// others by 2.
	pt = testPerftest(t, oob.AtomicBW, nil, peer)
	for k := 0; k < 64; k++ {
		off := pt.regionOff(0) + k*64
		v := binary.NativeEndian.Uint64(pt.buf[off:])
		binary.NativeEndian.PutUint64(pt.buf[off:], v+2+uint64(min(1, max(0, 2-k))))
	}
	pt.checkAtomicTarget(130)
	if pt.check.err != nil || pt.check.slots != 64 {
		t.Errorf("owner check: err %v, %d slots", pt.check.err, pt.check.slots)
	}
	pt.checkAtomicTarget(131)
	if pt.check.err == nil {
		t.Error("a missing FETCH_ADD went unnoticed")
	}
}

// TestCheckReadData checks the READ check: what landed in the areas must be
// the owner's pattern at the offsets read.
func TestCheckReadData(t *testing.T) {
	peer := oob.KeyMsg{QPN: 18, PSN: 0x999, RKey: 0x2000}
	const size = 100
	read := func(pt *perftest) {
		inc := pt.incr(size)
		for _, k := range pt.writtenSlots(size, 1000) {
			fillPattern(pt.buf[pt.areaOff(0)+k*inc:pt.areaOff(0)+k*inc+size], keySeed(peer), k*inc)
		}
	}
	pt := testPerftest(t, oob.ReadBW, []string{"-s", "100"}, peer)
	read(pt)
	pt.checkReadData(size, 1000)
	if pt.check.err != nil || pt.check.bytes != uint64(pt.slots(size)*size) || pt.check.seen[0] != peerSroce {
		t.Errorf("clean reads: err %v, %d bytes checked, peer %d", pt.check.err, pt.check.bytes, pt.check.seen[0])
	}
	pt = testPerftest(t, oob.ReadBW, []string{"-s", "100"}, peer)
	read(pt)
	pt.buf[pt.areaOff(0)+2*pt.incr(size)+99] ^= 1
	pt.checkReadData(size, 1000)
	if pt.check.err == nil || !strings.Contains(pt.check.err.Error(), "of the data read") {
		t.Errorf("damaged read: err %v", pt.check.err)
	}
}

// TestCheckAtomicFirstValue: against a sroce owner, the first value
// fetched from each slot must be the owner's pattern there.
func TestCheckAtomicFirstValue(t *testing.T) {
	peer := oob.KeyMsg{QPN: 18, PSN: 0x999, RKey: 0x2000}
	first := func(k int) uint64 {
		var b [8]byte
		fillPattern(b[:], keySeed(peer), k*64)
		return binary.NativeEndian.Uint64(b[:])
	}
	pt := testPerftest(t, oob.AtomicBW, nil, peer)
	pt.checkAtomicResult(0, 0, first(0))
	pt.checkAtomicResult(0, 5, first(5)^1)
	if pt.check.err == nil || !strings.Contains(pt.check.err.Error(), "the first atomic on slot 5") {
		t.Errorf("a wrong first value went unnoticed: err %v", pt.check.err)
	}
}

// TestWriteLatRegionStartsClear checks that a write-lat side's region does
// not start with the count the first WRITE brings: with keys whose pattern
// puts 1 where a 64-byte message's count lands, the side would take that
// byte for the peer's first WRITE and wait forever for the second, while
// the peer waits for the first.
func TestWriteLatRegionStartsClear(t *testing.T) {
	const size = 64
	pt := testPerftest(t, oob.WriteLat, []string{"-s", "64"}, oob.KeyMsg{QPN: 18, PSN: 0x999, RKey: 0x2000})
	found := false
	for psn := uint32(0); psn < 1<<16 && !found; psn++ {
		k := oob.KeyMsg{QPN: 17, PSN: psn, RKey: 0x1000}
		if patternByteAt(keySeed(k), size-1) == 1 {
			pt.local[0], found = k, true
		}
	}
	if !found {
		t.Fatal("no PSN below 65536 gives a pattern with 1 at byte 63")
	}
	pt.fillBuffers()
	if b := pt.buf[pt.regionOff(0)+size-1]; b != 0 {
		t.Errorf("the byte a 64-byte WRITE's count lands on starts as %#x, want 0", b)
	}
	// The area, which this side WRITEs from, still holds its pattern.
	if j := patternMismatch(pt.buf[pt.areaOff(0):pt.areaOff(0)+size], keySeed(pt.local[0]), 0); j >= 0 {
		t.Errorf("byte %d of the area is not this side's pattern", j)
	}
}
