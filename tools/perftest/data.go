package perftest

// Data patterns and checks of the perftest tools. perftest fills its
// buffers with random bytes and never looks at what arrives; sroce fills
// every area and region with a pattern derived from the owner's key
// message (QPN, PSN, rkey and GID, which the peer learns in the
// exchange), so that a sroce peer can check every byte it receives:
//
//   - WRITE: the target checks each slot the writer hit, once the writer's
//     run is over, against the writer's pattern at the same offset;
//   - READ: the reader checks what landed in its area against the owner's
//     pattern at the offsets it read;
//   - SEND: the receiver checks every message against the sender's pattern
//     (a message is the first size bytes of the sender's area);
//   - atomics: the requester checks that every fetched value is the previous
//     value of that slot plus one (FETCH_ADD) or unchanged (COMPARE_SWAP
//     with perftest's operands 0 and 0), and, against a sroce owner, that
//     the first value of each slot is the owner's pattern; the owner checks
//     after the run that each slot holds its first value plus the number of
//     FETCH_ADDs that hit it.
//
// Whether the peer is sroce is told by the data itself: if the first 16
// bytes checked (8 for atomics) are the peer's pattern the rest must be
// too; otherwise the peer is another implementation (random data, as
// perftest's) and only the checks that hold for any peer are made.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/sroce/sroce/tools/oob"
)

// gateLen is how many leading bytes must match a peer's pattern for the
// peer to count as sroce; below minCheckLen bytes nothing is checked.
const (
	gateLen     = 16
	minCheckLen = 8
)

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// keySeed returns the pattern seed of the buffer a key message describes.
func keySeed(k oob.KeyMsg) uint64 {
	s := uint64(k.QPN)<<24 | uint64(k.PSN)
	s = mix64(s ^ uint64(k.RKey)<<48)
	s = mix64(s ^ binary.BigEndian.Uint64(k.GID[:8]))
	return mix64(s ^ binary.BigEndian.Uint64(k.GID[8:]))
}

// patternWord returns the w-th 8-byte word of seed's pattern.
func patternWord(seed, w uint64) uint64 { return mix64(seed ^ w*0xd6e8feb86659fd93) }

// fillPattern writes bytes off.. of seed's pattern into b.
func fillPattern(b []byte, seed uint64, off int) {
	j := 0
	for j < len(b) {
		o := off + j
		if o%8 == 0 && len(b)-j >= 8 {
			binary.LittleEndian.PutUint64(b[j:], patternWord(seed, uint64(o/8)))
			j += 8
			continue
		}
		b[j] = byte(patternWord(seed, uint64(o/8)) >> (8 * (o % 8)))
		j++
	}
}

// patternMismatch returns the index of the first byte of b that differs
// from bytes off.. of seed's pattern, or -1.
func patternMismatch(b []byte, seed uint64, off int) int {
	var want [4096]byte
	for j := 0; j < len(b); j += len(want) {
		n := min(len(want), len(b)-j)
		fillPattern(want[:n], seed, off+j)
		for i := 0; i < n; i++ {
			if b[j+i] != want[i] {
				return j + i
			}
		}
	}
	return -1
}

// peerKind says what a peer's data told about it.
type peerKind int8

// Peer kinds.
const (
	peerUnknown peerKind = iota // nothing seen yet
	peerSroce                   // the data carries sroce's pattern
	peerForeign                 // another implementation
)

// dataCheck is the state of a run's data checks and their outcome.
type dataCheck struct {
	on   bool // sroce checks data (always, but tests may look)
	err  error
	seen []peerKind // per QP

	// Statistics, for tests and failure messages.
	bytes   uint64 // bytes compared with a pattern
	atomics uint64 // fetched values checked
	slots   uint64 // atomic target slots checked after the peer's run
	lost    uint64 // UC target slots no WRITE reached (the message was dropped)

	expect [][]byte // per QP: the message a sroce peer sends (SEND)

	last    []map[int]uint64 // per QP and slot: the last value fetched (atomics)
	initial []map[int]uint64 // per QP and slot: the value the owner filled in

	limitErr error // a --limit_bw or --limit_msgrate failure
}

// fail records the first failure.
func (c *dataCheck) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

// start prepares the checks once the peer's keys are known.
func (c *dataCheck) start(pt *perftest) {
	n := len(pt.qps)
	c.on = true
	c.seen = make([]peerKind, n)
	c.expect = make([][]byte, n)
	c.last = make([]map[int]uint64, n)
	for i := range c.last {
		c.last[i] = map[int]uint64{}
	}
}

// fillBuffers fills every area and region with its owner's pattern and
// notes the first word of each atomic slot, for the owner's check.
func (pt *perftest) fillBuffers() {
	c := &pt.check
	c.initial = make([]map[int]uint64, len(pt.qps))
	for i := range pt.qps {
		seed := keySeed(pt.local[i])
		fillPattern(pt.buf[pt.areaOff(i):pt.areaOff(i)+pt.area], seed, 0)
		region := pt.buf[pt.regionOff(i) : pt.regionOff(i)+pt.area]
		if pt.test == oob.WriteLat {
			// The last byte of a message's span in the region is the
			// count the peer's WRITEs carry, and the wait for the first
			// one ends when it holds 1. A pattern byte could hold 1
			// already (one run in 256), so the region starts zeroed,
			// as perftest's does; the peer's WRITEs fill what is checked.
			clear(region)
		} else {
			fillPattern(region, seed, 0)
		}
		if pt.verb == oob.VerbAtomic {
			c.initial[i] = map[int]uint64{}
			inc := pt.incr(oob.DefSizeAtomic)
			for k := 0; k < pt.slots(oob.DefSizeAtomic); k++ {
				c.initial[i][k] = binary.NativeEndian.Uint64(region[k*inc:])
			}
		}
	}
}

// gate decides, from the leading bytes of the first data checked, whether
// QP i's peer is sroce; it reports whether to check the data.
func (c *dataCheck) gate(i int, b []byte, seed uint64, off int) bool {
	switch c.seen[i] {
	case peerSroce:
		return true
	case peerForeign:
		return false
	}
	if len(b) < minCheckLen {
		return false
	}
	if patternMismatch(b[:min(len(b), gateLen)], seed, off) >= 0 {
		c.seen[i] = peerForeign
		return false
	}
	c.seen[i] = peerSroce
	return true
}

// compare checks b against bytes off.. of seed's pattern for QP i.
func (c *dataCheck) compare(i int, what string, b []byte, seed uint64, off int) {
	if !c.gate(i, b, seed, off) {
		return
	}
	c.bytes += uint64(len(b))
	if j := patternMismatch(b, seed, off); j >= 0 {
		c.fail("QP %d: byte %d of %s is %#02x, the peer wrote %#02x", i, off+j, what, b[j], patternByteAt(seed, off+j))
	}
}

// patternByteAt returns byte o of seed's pattern.
func patternByteAt(seed uint64, o int) byte {
	var b [1]byte
	fillPattern(b[:], seed, o)
	return b[0]
}

// checkRecv checks a received message of QP i (SEND): it must be the
// first size bytes of the sender's pattern.
func (pt *perftest) checkRecv(i int, msg []byte, size uint64, byteLen uint32) {
	c := &pt.check
	if !c.on || c.seen[i] == peerForeign {
		return
	}
	if uint64(byteLen) != size {
		c.fail("QP %d: a message of %d bytes arrived, expected %d", i, byteLen, size)
		return
	}
	seed := keySeed(pt.peer[i])
	if !c.gate(i, msg, seed, 0) {
		return
	}
	if uint64(len(c.expect[i])) != size {
		c.expect[i] = make([]byte, size)
		fillPattern(c.expect[i], seed, 0)
	}
	c.bytes += size
	if string(msg) != string(c.expect[i]) {
		j := patternMismatch(msg, seed, 0)
		c.fail("QP %d: byte %d of a received message is %#02x, the peer sent %#02x", i, j, msg[j], c.expect[i][j])
	}
}

// writtenSlots returns the slots that the first iters work requests of a
// QP hit for size-byte messages.
func (pt *perftest) writtenSlots(size, iters uint64) []int {
	n := pt.slots(size)
	seen := make([]bool, n)
	var out []int
	bound := uint64(n * max(pt.p.PostList, 1))
	for s := uint64(0); s < min(iters, bound); s++ {
		if k := pt.slotOf(s, size); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// checkReadData checks what the READs of one run left in the areas: each
// slot read holds the owner's pattern at the slot's offset.
func (pt *perftest) checkReadData(size, iters uint64) {
	pt.checkSlots(size, iters, pt.areaOff, "the data read")
}

// checkWriteTarget checks the regions after the peer's WRITEs of size
// bytes, iters per QP: each slot hit holds the writer's pattern.
func (pt *perftest) checkWriteTarget(size, iters uint64) {
	if pt.p.Conn == oob.UC {
		pt.awaitUCWrites(size, iters)
	}
	pt.checkSlots(size, iters, pt.regionOff, "the written region")
}

// ucSettle bounds the wait for UC WRITEs still on their way.
const ucSettle = 2 * time.Second

// awaitUCWrites waits until the device has received as many packets as
// the peer's UC WRITEs make, or ucSettle passes. The peer's report comes
// when its sends completed, which for UC means handed to its link: unlike
// RC, nothing says the packets have arrived. Packets that never come were
// lost, which UC allows; the check then finds their slots unwritten.
func (pt *perftest) awaitUCWrites(size, iters uint64) {
	mtu := uint64(pt.pro.MTU.Bytes())
	if mtu == 0 {
		mtu = 4096
	}
	perMsg := max((size+mtu-1)/mtu, 1)
	want := perMsg * iters * uint64(len(pt.qps))
	deadline := time.Now().Add(ucSettle)
	for pt.syncMemory() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// checkSlots checks, for every QP i, the slots that iters size-byte
// transfers hit in the buffer at base(i): each holds the peer's pattern at
// the slot's offset.
func (pt *perftest) checkSlots(size, iters uint64, base func(int) int, what string) {
	pt.syncMemory()
	inc := pt.incr(size)
	slots := pt.writtenSlots(size, iters)
	for i := range pt.qps {
		seed, own := keySeed(pt.peer[i]), keySeed(pt.local[i])
		for _, k := range slots {
			off := base(i) + k*inc
			b := pt.buf[off : off+int(size)]
			if pt.p.Conn == oob.UC && patternMismatch(b, own, k*inc) < 0 {
				// UC drops a message that lost a packet: the slot still
				// holds this side's own pattern. That is no fault, and no
				// sign of a foreign peer either.
				pt.check.lost++
				continue
			}
			pt.check.compare(i, what, b, seed, k*inc)
		}
	}
}

// checkAtomicResult checks the value an atomic of QP i fetched from slot k.
func (pt *perftest) checkAtomicResult(i, k int, val uint64) {
	c := &pt.check
	if !c.on {
		return
	}
	if prev, ok := c.last[i][k]; ok {
		want := prev
		if pt.p.Atomic == oob.FetchAndAdd {
			want++
		}
		c.atomics++
		if val != want {
			c.fail("QP %d: an atomic fetched %#x from slot %d, which held %#x before", i, val, k, want)
		}
	} else {
		off := k * pt.incr(oob.DefSizeAtomic)
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], val)
		seed := keySeed(pt.peer[i])
		if c.gate(i, b[:], seed, off) {
			c.atomics++
			if patternMismatch(b[:], seed, off) >= 0 {
				var w [8]byte
				fillPattern(w[:], seed, off)
				c.fail("QP %d: the first atomic on slot %d fetched %#x, the peer's memory held %#x",
					i, k, val, binary.NativeEndian.Uint64(w[:]))
			}
		}
	}
	c.last[i][k] = val
}

// checkAtomicTarget checks this side's regions after the peer ran iters
// atomics per QP: each slot holds its first value plus the FETCH_ADDs that
// hit it (COMPARE_SWAP with perftest's operands changes nothing).
func (pt *perftest) checkAtomicTarget(iters uint64) {
	pt.syncMemory()
	c := &pt.check
	size := uint64(oob.DefSizeAtomic)
	n := uint64(pt.slots(size))
	inc := pt.incr(size)
	for i := range pt.qps {
		hits := make([]uint64, n)
		if l := uint64(pt.p.PostList); l > 1 {
			// Slots repeat with every post list: count one list and
			// scale, so that the peer's count sets no loop's length.
			for s := uint64(0); s < min(iters, l); s++ {
				hits[pt.slotOf(s, size)] += iters / l
				if s < iters%l {
					hits[pt.slotOf(s, size)]++
				}
			}
		} else {
			for k := uint64(0); k < n; k++ {
				hits[k] = iters / n
				if k < iters%n {
					hits[k]++
				}
			}
		}
		for k := 0; k < int(n); k++ {
			want := c.initial[i][k]
			if pt.p.Atomic == oob.FetchAndAdd {
				want += hits[k]
			}
			got := binary.NativeEndian.Uint64(pt.buf[pt.regionOff(i)+k*inc:])
			c.slots++
			if got != want {
				c.fail("QP %d: slot %d holds %#x after the peer's %d atomics, expected %#x", i, k, got, iters, want)
				return
			}
		}
	}
}

// afterPeerRun makes the checks that need the peer's run to be over: the
// targets of its WRITEs and atomics. remote is the peer's report, whose
// iteration count says how many work requests hit the regions.
func (c *dataCheck) afterPeerRun(pt *perftest, size uint64, remote *oob.BWReport) {
	if !c.on || remote == nil || pt.p.DurationMode {
		return
	}
	if size > pt.p.Size {
		c.fail("the peer reported %d-byte messages, larger than the %d bytes this side's buffers were set up for", size, pt.p.Size)
		return
	}
	iters := remote.Iters / uint64(max(pt.p.NumQPs, 1))
	switch pt.verb {
	case oob.VerbWrite:
		pt.checkWriteTarget(size, iters)
	case oob.VerbAtomic:
		pt.checkAtomicTarget(iters)
	}
}

// limits applies --limit_bw and --limit_msgrate to this side's result.
func (c *dataCheck) limits(p oob.Params, r oob.BWReport) {
	if c.limitErr != nil {
		return
	}
	if p.LimitBW > 0 && r.BWAvg < p.LimitBW {
		c.limitErr = errors.New("Error: BW result is below bw limit")
	} else if p.LimitMsgRate > 0 && r.MsgRate < p.LimitMsgRate {
		c.limitErr = errors.New("Error: Msg rate  is below msg_rate limit")
	}
}
