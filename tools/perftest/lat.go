package perftest

// The latency loops of the perftest tools, after perftest 4.5's
// run_iter_lat_send (send-lat: the client sends, the server answers each
// message with one of its own), run_iter_lat_write (write-lat: each side
// WRITEs when the peer's last WRITE has changed the last byte of its
// buffer) and run_iter_lat (read-lat and atomic-lat: the client posts one
// request at a time and waits for its completion). The times of the posts
// make the report.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// latRun is the state of one latency run of one size.
type latRun struct {
	pt     *perftest
	size   uint64
	iters  uint64 // 0 with -D
	dur    *durationClock
	stamps []uint64

	pendingRx int    // receive completions not yet taken by the loop
	sendsDone uint64 // signaled sends completed
	rposted   uint64
	lastWC    verbs.WC
	sge       [1]mr.SGE
}

// runLat runs one size of a latency test on this side and prints its row.
func (pt *perftest) runLat(size uint64) error {
	p := pt.p
	r := &latRun{pt: pt, size: size, iters: p.Iters, dur: pt.newDurationClock(),
		rposted: uint64(p.RxDepth)}
	if !p.DurationMode {
		r.stamps = make([]uint64, p.Iters)
	}
	var err error
	switch pt.test {
	case oob.SendLat:
		err = r.send()
	case oob.WriteLat:
		err = r.write()
	default:
		err = r.readAtomic()
	}
	if err != nil {
		return err
	}
	switch pt.test {
	case oob.ReadLat:
		pt.checkReadData(size, 1)
	case oob.WriteLat:
		pt.checkWriteLatData(size)
	}
	r.print()
	return nil
}

// print prints the run's row (and with -U or -H its samples).
func (r *latRun) print() {
	pt, p := r.pt, r.pt.p
	tpu, units := 1000.0, "usec"
	if p.Cycles {
		tpu, units = 1, "cycles"
	}
	rtt := oob.RTTFactor(pt.test)
	if p.DurationMode {
		ticks := r.dur.sampleEnd - r.dur.sampleStart
		avg, tps := oob.LatDuration(max(ticks, 1), max(r.dur.counted, 1), rtt, tpu)
		pt.out(oob.LatDurationRow(p, r.size, r.dur.counted, avg, tps))
		return
	}
	rep, samples := oob.NewLatReport(oob.LatInput{Size: r.size, Iters: r.iters, Stamps: r.stamps,
		RTTFactor: rtt, TicksPerUsec: tpu})
	if p.Unsorted {
		pt.out(oob.LatSamples(units, samples))
	}
	if p.Histogram {
		sorted := slices.Clone(samples)
		slices.Sort(sorted)
		pt.out(oob.LatSamples(units, sorted[:max(len(sorted)-2, 0)]))
	}
	if (p.Unsorted || p.Histogram) && pt.full() {
		pt.out(oob.LatHeader(false, false))
	}
	pt.out(oob.LatRow(p, rep))
}

// more reports whether the loop goes on with its i-th step of iters.
func (r *latRun) more(i uint64) bool {
	if r.dur.on {
		return !r.dur.ended()
	}
	return i < r.iters
}

// stamp waits --latency_gap microseconds, as perftest does before each
// post, and notes the time of the scnt-th post.
func (r *latRun) stamp(scnt uint64) {
	if gap := r.pt.p.LatencyGap; gap > 0 {
		for end := time.Now().Add(time.Duration(gap) * time.Microsecond); time.Now().Before(end); {
			// perftest spins through the gap too
		}
	}
	if !r.dur.on {
		r.stamps[scnt] = r.pt.now()
	}
}

// next waits for completions and sorts them: receives are counted in
// pendingRx, signaled sends in sendsDone. It returns errStall, or in -D
// mode nil when the time is up. Before a -D run's clock starts (a server
// waiting for the first message) the stall limit bounds the wait.
func (r *latRun) next() error {
	pt := r.pt
	var wcs []verbs.WC
	var err error
	if r.dur.on {
		since := time.Now()
		for len(wcs) == 0 {
			r.dur.update()
			if r.dur.ended() {
				return nil
			}
			if err := pt.cq.lost(); err != nil {
				return err
			}
			if pt.ctx.Err() != nil {
				return context.Cause(pt.ctx)
			}
			if !r.dur.started && time.Since(since) > pt.stall {
				return errStall
			}
			n, werr := pt.cq.cq.WaitTimeout(pt.cq.buf, 10*time.Millisecond)
			if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
				return werr
			}
			wcs = pt.cq.buf[:n]
		}
	} else if wcs, err = pt.cq.wait(); err != nil {
		return err
	}
	for i := range wcs {
		wc := &wcs[i]
		if wc.Status != verbs.WCSuccess {
			return pt.completionError(wc, r.sendsDone, r.sendsDone)
		}
		q, seq := splitWRID(wc.WRID)
		if wc.Opcode == verbs.WCRecv {
			if r.pendingRx == 0 && !r.dur.started {
				r.dur.start()
			}
			pt.checkRecv(q, pt.recv.message(q, int(seq), r.size), r.size, pt.recv.dataLen(wc.ByteLen))
			r.pendingRx++
			if r.dur.on || r.rposted+1 <= r.iters {
				if err := pt.recv.post(q, int(seq)); err != nil {
					return runErrorf("Couldn't post recv: %v", err)
				}
				r.rposted++
			}
			continue
		}
		r.sendsDone++
		r.lastWC = *wc
	}
	return nil
}

// stalled describes a wait of the loop that gave up.
func (r *latRun) stalled(err error, done uint64) error {
	var re *runError
	if errors.As(err, &re) {
		return err
	}
	return r.pt.stallError(err, "iterations", done, r.iters)
}

// send is run_iter_lat_send: the server waits for a message before each of
// its sends, the client after each of its sends but the first.
func (r *latRun) send() error {
	pt, p := r.pt, r.pt.p
	client := pt.client()
	cqMod := uint64(max(p.CQMod, 1))
	var scnt, rcnt, want uint64
	for r.more(scnt) || r.more(rcnt) {
		if r.more(rcnt) && !(scnt < 1 && client) {
			for r.pendingRx == 0 && !r.dur.ended() {
				if err := r.next(); err != nil {
					return r.stalled(err, rcnt)
				}
			}
			if r.dur.ended() {
				break
			}
			r.pendingRx--
			rcnt++
			if r.dur.sampling() {
				r.dur.counted++
			}
		}
		if r.more(scnt) {
			r.stamp(scnt)
			scnt++
			signaled := scnt%cqMod == 0 || (!r.dur.on && scnt == r.iters)
			wr := verbs.SendWR{WRID: wrID(0, scnt), Opcode: verbs.WROpSend, SGL: r.sge[:]}
			r.sge[0] = pt.mr.SGE(pt.areaOff(0), int(r.size))
			if signaled {
				wr.Flags = verbs.Signaled
			}
			if p.Conn == oob.UD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = pt.ahs[0], bth.QPN(pt.peer[0].QPN), oob.DefQKey
			}
			if err := pt.qps[0].PostSend(&wr); err != nil {
				return runErrorf("Couldn't post send: scnt=%d: %v", scnt, err)
			}
			if signaled {
				want++
				for r.sendsDone < want && !r.dur.ended() {
					if err := r.next(); err != nil {
						return r.stalled(err, scnt)
					}
				}
			}
		}
		r.dur.update()
		if r.dur.ended() {
			break
		}
	}
	return nil
}

// write is run_iter_lat_write: each side waits until the peer's WRITE set
// the last byte of its region to the iteration count (the client before
// each of its WRITEs, the server before each but the first: the server
// writes first), then WRITEs the next count into the peer's.
func (r *latRun) write() error {
	pt := r.pt
	size := int(r.size)
	post := pt.areaOff(0) + size - 1
	poll := pt.regionOff(0) + size - 1
	client := pt.client()
	r.dur.start()
	var scnt, ccnt, rcnt uint64
	for r.more(scnt) || r.more(ccnt) || r.more(rcnt) {
		if r.more(rcnt) && !(scnt < 1 && !client) {
			rcnt++
			if err := r.awaitByte(poll, byte(rcnt)); err != nil {
				return r.stalled(err, rcnt-1)
			}
			if r.dur.ended() {
				break
			}
		}
		if r.more(scnt) {
			r.stamp(scnt)
			scnt++
			pt.buf[post] = byte(scnt)
			r.sge[0] = pt.mr.SGE(pt.areaOff(0), size)
			wr := verbs.SendWR{WRID: wrID(0, scnt), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: r.sge[:], RemoteAddr: pt.peer[0].VAddr, RKey: pt.peer[0].RKey}
			if err := pt.qps[0].PostSend(&wr); err != nil {
				return runErrorf("Couldn't post send: scnt=%d: %v", scnt, err)
			}
		}
		if r.more(ccnt) {
			for r.sendsDone <= ccnt && !r.dur.ended() {
				if err := r.next(); err != nil {
					return r.stalled(err, ccnt)
				}
			}
			ccnt++
			if r.dur.sampling() {
				r.dur.counted++
			}
		}
		r.dur.update()
		if r.dur.ended() {
			break
		}
	}
	return nil
}

// awaitByte waits until byte off of the buffer holds want, which the
// peer's WRITE puts there. The device loop places WRITEs under its lock;
// syncMemory takes that lock before each look, so the byte is read after
// whatever the loop has written (a daemon's engine writes memory shared
// with it, which an atomic load reads). It spins for a short while, then backs
// off to short sleeps, so that a slow peer does not starve the device
// loops of the processor.
func (r *latRun) awaitByte(off int, want byte) error {
	pt := r.pt
	const spinFor = time.Millisecond
	var last uint64
	start := time.Now()
	for spins := 0; ; spins++ {
		if pt.h.shared() {
			// The daemon's engine writes the shared buffer while this
			// process reads it: an atomic load sees its stores.
			if loadByte(pt.buf, off) == want {
				return nil
			}
		} else if c := pt.syncMemory(); c != last || spins == 0 {
			last = c
			if pt.buf[off] == want {
				return nil
			}
		}
		if r.dur.on {
			r.dur.update()
			if r.dur.ended() {
				return nil
			}
		}
		if spins%64 != 63 {
			continue
		}
		waited := time.Since(start)
		if waited < spinFor {
			pt.h.yield()
			continue
		}
		if err := pt.cq.lost(); err != nil {
			return err
		}
		if pt.ctx.Err() != nil {
			return context.Cause(pt.ctx)
		}
		if waited > pt.stall {
			return errStall
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// readAtomic is run_iter_lat: one READ or atomic at a time, each waited
// for.
func (r *latRun) readAtomic() error {
	pt := r.pt
	r.dur.start()
	var scnt uint64
	for r.more(scnt) {
		r.stamp(scnt)
		wr := pt.sendWR(0, 0, r.size, true, r.sge[:])
		wr.WRID = wrID(0, scnt)
		scnt++
		if err := pt.qps[0].PostSend(&wr); err != nil {
			return runErrorf("Couldn't post send: scnt=%d: %v", scnt, err)
		}
		for r.sendsDone < scnt && !r.dur.ended() {
			if err := r.next(); err != nil {
				return r.stalled(err, scnt-1)
			}
		}
		if r.dur.ended() {
			break
		}
		if pt.verb == oob.VerbAtomic {
			pt.checkAtomicResult(0, 0, pt.resultValue(0, 0))
		}
		if r.dur.sampling() {
			r.dur.counted++
		}
		r.dur.update()
	}
	return nil
}

// checkWriteLatData checks the last message of the peer's WRITEs: the
// peer's pattern up to the last byte, which carries the iteration count.
func (pt *perftest) checkWriteLatData(size uint64) {
	if size < 2 {
		return
	}
	pt.syncMemory()
	off := pt.regionOff(0)
	pt.check.compare(0, "the written region", pt.buf[off:off+int(size)-1], keySeed(pt.peer[0]), 0)
}
