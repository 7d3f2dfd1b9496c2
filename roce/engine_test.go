package roce_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	tb "github.com/sroce/sroce/internal/testbed"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// engineDevice opens a started device in mode on a port of a new router.
func engineDevice(t *testing.T, mode roce.EngineMode, spinFor time.Duration) (*roce.Device, *memlink.Port) {
	t.Helper()
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 7, memlink.Impairments{})
	port := router.NewPort(net.HardwareAddr{2, 0, 0, 0, 7, 1}, 1500)
	gid := bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 7, 0, 1}))
	dev, err := roce.Open(port, &roce.Options{Clock: clock, GIDs: []bth.GID{gid}, Engine: mode, SpinFor: spinFor})
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	return dev, port
}

// TestEngineCloseReturns closes a running device in every mode: Close must
// return promptly, spinning or not, and leave no goroutine of the loop.
func TestEngineCloseReturns(t *testing.T) {
	forEachEngine(t, func(t *testing.T, mode roce.EngineMode) {
		before := runtime.NumGoroutine()
		dev, _ := engineDevice(t, mode, 0)
		if got := dev.Engine(); got != mode {
			t.Fatalf("engine %v, asked for %v", got, mode)
		}
		time.Sleep(20 * time.Millisecond) // let the loop settle into its wait (or spin)
		done := make(chan error, 1)
		go func() { done <- dev.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Close of a %v device did not return within 5s", mode)
		}
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			t.Errorf("%d goroutines after Close, %d before Start", n, before)
		}
	})
}

// TestEngineLinkGone takes the link away under a running device in every
// mode: the loop must see it, report the port down and stop.
func TestEngineLinkGone(t *testing.T) {
	forEachEngine(t, func(t *testing.T, mode roce.EngineMode) {
		dev, port := engineDevice(t, mode, 0)
		defer dev.Close()
		port.Close()
		deadline := time.Now().Add(5 * time.Second)
		for dev.Counter(verbs.CntLinkDowned) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("a %v device did not notice its link closing within 5s", mode)
			}
			time.Sleep(time.Millisecond)
		}
		if st := dev.QueryPort().State; st != verbs.PortDown {
			t.Errorf("port state %v after the link went away", st)
		}
	})
}

// TestAdaptiveIdleSleeps checks that an idle adaptive device stops spinning
// after SpinFor: over half a second of idleness the process uses a small
// fraction of a CPU, where a spinning device uses all of one.
func TestAdaptiveIdleSleeps(t *testing.T) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	measure := func(mode roce.EngineMode) time.Duration {
		dev, _ := engineDevice(t, mode, 200*time.Microsecond)
		defer dev.Close()
		time.Sleep(50 * time.Millisecond)
		c0 := cpu()
		time.Sleep(500 * time.Millisecond)
		return cpu() - c0
	}
	spin := measure(roce.EngineSpin)
	adaptive := measure(roce.EngineAdaptive)
	t.Logf("CPU used over 500ms idle: spin %v, adaptive %v", spin, adaptive)
	if adaptive > spin/4 {
		t.Errorf("an idle adaptive device used %v of CPU in 500ms, a spinning one %v: it does not go to sleep", adaptive, spin)
	}
}

// stallLink is a link that can refuse to transmit: while stalled its
// WriteBatch waits (as a link that waits for room in the kernel does) and
// its WriteBatchNow takes nothing.
type stallLink struct {
	*memlink.Port
	stalled atomic.Bool
}

func (l *stallLink) WriteBatch(frames [][]byte) (int, error) {
	for l.stalled.Load() {
		time.Sleep(time.Millisecond)
	}
	return l.Port.WriteBatch(frames)
}

func (l *stallLink) Caps() linkcap.Caps { return l.Port.Caps() | linkcap.WriteNow }

func (l *stallLink) WriteBatchNow(frames [][]byte) (int, error) {
	if l.stalled.Load() {
		return 0, nil
	}
	return l.Port.WriteBatch(frames)
}

// TestTransmitStallDoesNotBlock stalls a device's link under a posted WRITE:
// control calls must not wait for the link meanwhile, frames kept through a
// short stall go out afterwards, and a stall longer than the loop's limit
// drops them as failed sends, which RC recovers by retransmission.
func TestTransmitStallDoesNotBlock(t *testing.T) {
	for _, mode := range []roce.EngineMode{roce.EngineSleep, roce.EngineInline} {
		t.Run(mode.String(), func(t *testing.T) {
			var links []*stallLink
			b := linkedPair(t, 9, mode, 64, func(p *memlink.Port) roce.Link {
				l := &stallLink{Port: p}
				links = append(links, l)
				return l
			})
			nodes := b.Nodes
			a, c := nodes[0], nodes[1]
			qa, _ := b.PairQPs(rcOpts{Timeout: 14}) // 67 ms retransmit timeout
			lm, _ := a.Reg(t, 4096, 0, 1)
			rm, _ := c.Reg(t, 4096, 0, 2)
			// The wall clock: the bug is a goroutine blocked in the link's
			// write, which only real goroutines show. The short stall is
			// a fifth of the engine's limit (txStuckMax, 100 ms), so a
			// timer that fires late on a loaded machine stays below it.
			write := func(id uint64, stall time.Duration) {
				t.Helper()
				links[0].stalled.Store(true)
				// The stall ends on its own: a goroutine that waits for
				// the link (the bug this test is about) cannot end it.
				unstall := time.AfterFunc(stall, func() { links[0].stalled.Store(false) })
				defer unstall.Stop()
				if err := qa.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
					SGL: []mr.SGE{lm.SGE(0, 4096)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				go func() {
					a.Dev.Counters()
					qa.Query()
					close(done)
				}()
				select {
				case <-done:
				case <-time.After(stall / 2):
					// Only the long stall is long enough to tell a
					// control call that waits for the link from one
					// that a loaded machine ran late.
					if stall >= 100*time.Millisecond {
						t.Errorf("control calls did not return within %v while the link was stalled for %v", stall/2, stall)
					}
				}
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("control calls still waiting 10s after the stall ended")
				}
				var wc [1]verbs.WC
				n, err := a.SCQ.WaitTimeout(wc[:], 10*time.Second)
				if n != 1 || wc[0].WRID != id || wc[0].Status != verbs.WCSuccess {
					t.Fatalf("WRITE %d after a %v stall: %d completions, %+v, %v", id, stall, n, wc[0], err)
				}
			}
			write(1, 20*time.Millisecond)
			if n := a.Dev.Counter(verbs.CntSendErr); n != 0 {
				t.Errorf("%d send errors after a stall shorter than the limit", n)
			}
			write(2, 400*time.Millisecond)
			if a.Dev.Counter(verbs.CntSendErr) == 0 {
				t.Error("no send error counted after a stall longer than the limit")
			}
		})
	}
}

// batchLink records, for each transmit call, the opcodes of its frames.
type batchLink struct {
	*memlink.Port
	mu      sync.Mutex
	batches [][]bth.Opcode
}

func (l *batchLink) WriteBatch(frames [][]byte) (int, error) {
	ops := make([]bth.Opcode, 0, len(frames))
	for _, f := range frames {
		var p bth.Packet
		if p.Parse(f) == nil {
			ops = append(ops, p.BTH().Opcode())
		}
	}
	n, err := l.Port.WriteBatch(frames)
	l.mu.Lock()
	l.batches = append(l.batches, ops[:n])
	l.mu.Unlock()
	return n, err
}

// pollerLink is a batchLink whose readiness only the goroutines that poll
// see: a frame's arrival does not wake the device's loop (WaitReady waits
// for Wake or its timeout), so the polls receive every frame and the loop
// only acts on its deadlines and on kicks. Which of the two goroutines
// takes a frame first is otherwise the scheduler's choice.
type pollerLink struct {
	*batchLink
	wake chan struct{}
}

func newPollerLink(p *memlink.Port) *pollerLink {
	return &pollerLink{batchLink: &batchLink{Port: p}, wake: make(chan struct{}, 1)}
}

// Wake implements roce.Link.
func (l *pollerLink) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// WaitReady implements roce.ReadyWaiter without looking at the frames.
func (l *pollerLink) WaitReady(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.wake:
	case <-t.C:
	}
	return nil
}

// inlineTxHold is how long an inline device keeps the ACKs a poll made
// for the program's next post (roce's txHoldMax).
const inlineTxHold = 50 * time.Microsecond

// TestInlineACKRidesWithNextPost runs a SEND ping-pong between two inline
// devices, polling busily as perftest's send_lat does: the ACK of each SEND
// a poll receives waits for the answer the program posts next and leaves in
// the same transmit call (before, every ACK cost a call of its own). When
// no post follows, the ACK still leaves when the clock reaches its bound
// and completes the peer's SEND.
//
// The devices run on a virtual clock that stands still during the
// ping-pong: the hold and the retransmit timer are clock time, and on the
// wall clock a goroutine the machine does not run for 67 ms (two CPUs
// shared with other work, the race detector, GOMAXPROCS=1) let the
// retransmit timer fire and the hold expire, which says nothing about the
// engine.
func TestInlineACKRidesWithNextPost(t *testing.T) {
	clock := new(memlink.VirtualClock)
	var links []*pollerLink
	b := tb.Pair(t, clock, 11, roce.EngineInline, 256, func(p *memlink.Port) roce.Link {
		l := newPollerLink(p)
		links = append(links, l)
		return l
	})
	nodes := b.Nodes
	qa, qb := b.PairQPs(rcOpts{Timeout: 14})
	ma, _ := nodes[0].Reg(t, 64, 0, 1)
	mb, _ := nodes[1].Reg(t, 64, 0, 2)
	const rounds = 200
	for _, x := range []struct {
		qp *roce.QP
		m  *roce.MR
	}{{qa, ma}, {qb, mb}} {
		for i := 0; i < rounds+1; i++ {
			if err := x.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{x.m.SGE(0, 8)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(q *roce.QP, m *roce.MR, flags verbs.SendFlags) {
		t.Helper()
		if err := q.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, Flags: flags, SGL: []mr.SGE{m.SGE(8, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	// poll polls cq busily until a completion arrives; the bound is real
	// time and only ends a test that would hang.
	poll := func(cq *roce.CQ, what string) (verbs.WC, error) {
		var wc [1]verbs.WC
		deadline := time.Now().Add(10 * time.Second)
		for cq.Poll(wc[:]) == 0 {
			if time.Now().After(deadline) {
				return wc[0], fmt.Errorf("no completion for %s within 10s (virtual time %v)", what, clock.Now())
			}
		}
		if wc[0].Status != verbs.WCSuccess {
			return wc[0], fmt.Errorf("%s: %v", what, wc[0].Status)
		}
		return wc[0], nil
	}
	echoed := make(chan error, 1)
	go func() {
		for i := 0; i < rounds; i++ {
			if _, err := poll(nodes[1].RCQ, "the ping"); err != nil {
				echoed <- err
				return
			}
			if err := qb.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{mb.SGE(8, 8)}}); err != nil {
				echoed <- err
				return
			}
		}
		echoed <- nil
	}()
	for i := 0; i < rounds; i++ {
		send(qa, ma, 0)
		if _, err := poll(nodes[0].RCQ, "the answer"); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	together := 0
	links[1].mu.Lock()
	for _, ops := range links[1].batches {
		ack, req := false, false
		for _, op := range ops {
			ack = ack || op == bth.RCAcknowledge
			req = req || op == bth.RCSendOnly
		}
		if ack && req {
			together++
		}
	}
	links[1].mu.Unlock()
	t.Logf("%d of %d answers left with the ACK of their ping", together, rounds)
	if together < rounds/2 {
		t.Errorf("only %d of %d answers left in one transmit call with the ACK of the SEND they answer", together, rounds)
	}
	// A last ping that nobody answers: its ACK waits while the clock
	// stands still, and leaves when the clock reaches the hold's bound,
	// long before the 67 ms retransmit timeout.
	send(qa, ma, verbs.Signaled)
	if _, err := poll(nodes[1].RCQ, "the last ping"); err != nil {
		t.Fatal(err)
	}
	var wc [1]verbs.WC
	for i := 0; i < 1000; i++ {
		if nodes[0].SCQ.Poll(wc[:]) != 0 {
			t.Fatalf("the unanswered SEND completed before the clock moved: its ACK was not held for a post (%+v)", wc[0])
		}
	}
	clock.Advance(inlineTxHold)
	if _, err := poll(nodes[0].SCQ, "the unanswered SEND, whose ACK must leave when the clock reaches the hold's bound"); err != nil {
		t.Fatal(err)
	}
	if n := nodes[0].Dev.Counter(verbs.CntTimeouts); n != 0 {
		t.Errorf("%d retransmit timeouts in %v of virtual time, under the 67 ms timeout", n, clock.Now())
	}
}

// lendLink lends the frames it reads from a memlink port, and poisons
// them when they come back: an engine that kept a lent frame past
// ReleaseLent would read the poison. It lends transmit buffers too, fewer
// than a batch, and takes at most a few frames a call; a buffer it takes
// is sent and poisoned at once, so a frame the engine touched after
// handing it over would arrive damaged.
type lendLink struct {
	*memlink.Port
	bufs           [][]byte
	sizes          []int
	out            int // frames lent and not yet released
	lends, release int

	txFree    [][]byte
	txOut     map[*byte]bool // transmit buffers lent
	submitted int
	txErr     string
}

const (
	lendTxBufs = 16 // transmit buffers the link has
	lendTxTake = 5  // frames SubmitLent takes a call
)

func (l *lendLink) Caps() linkcap.Caps { return l.Port.Caps() | linkcap.Lend }

func (l *lendLink) TxBufSize() int { return 9000 }

func (l *lendLink) LendTx(bufs [][]byte) int {
	if l.txOut == nil {
		l.txOut = make(map[*byte]bool)
		for range lendTxBufs {
			l.txFree = append(l.txFree, make([]byte, 9000))
		}
	}
	n := 0
	for ; n < len(bufs) && len(l.txFree) > 0; n++ {
		b := l.txFree[len(l.txFree)-1]
		l.txFree = l.txFree[:len(l.txFree)-1]
		l.txOut[&b[0]] = true
		bufs[n] = b
	}
	return n
}

// takeBack ends the loan of b, which must be out.
func (l *lendLink) takeBack(b []byte) {
	if cap(b) != 9000 || !l.txOut[&b[:1][0]] {
		l.txErr = "a transmit buffer came back that was not lent"
		return
	}
	delete(l.txOut, &b[:1][0])
	b = b[:9000]
	for j := range b {
		b[j] = 0x5a
	}
	l.txFree = append(l.txFree, b)
}

func (l *lendLink) SubmitLent(frames [][]byte) (int, error) {
	frames = frames[:min(len(frames), lendTxTake)]
	n, err := l.Port.WriteBatch(frames)
	for _, f := range frames[:n] {
		l.takeBack(f)
	}
	l.submitted += n
	return n, err
}

// WriteBatch is the copying path, which an engine on a lending link must
// not take: every frame is built in a lent buffer.
func (l *lendLink) WriteBatch(frames [][]byte) (int, error) {
	l.txErr = "a frame went out through WriteBatch, copied, instead of in a lent buffer"
	return l.Port.WriteBatch(frames)
}

func (l *lendLink) ReturnTx(bufs [][]byte) {
	for _, b := range bufs {
		l.takeBack(b)
	}
}

func (l *lendLink) ReadLent(frames [][]byte) (int, error) {
	if l.out != 0 {
		panic("ReadLent before ReleaseLent")
	}
	if len(l.bufs) < len(frames) {
		l.bufs, l.sizes = make([][]byte, len(frames)), make([]int, len(frames))
		for i := range l.bufs {
			l.bufs[i] = make([]byte, 9000)
		}
	}
	n, err := l.Port.ReadBatch(l.bufs[:len(frames)], l.sizes[:len(frames)], 0)
	for i := 0; i < n; i++ {
		frames[i] = l.bufs[i][:l.sizes[i]]
	}
	if n > 0 {
		l.out, l.lends = n, l.lends+1
	}
	return n, err
}

func (l *lendLink) ReleaseLent() {
	for i := 0; i < l.out; i++ {
		for j := range l.bufs[i] {
			l.bufs[i][j] = 0xa5
		}
	}
	if l.out > 0 {
		l.release++
	}
	l.out = 0
}

// TestEngineLentFrames runs RC WRITEs, READs and SENDs between two devices
// whose links lend received frames and transmit buffers, in every engine
// mode: the data must arrive whole although every frame is poisoned once
// handled or handed over, and every lend must be given back.
func TestEngineLentFrames(t *testing.T) {
	forEachEngine(t, func(t *testing.T, mode roce.EngineMode) {
		var links []*lendLink
		b := linkedPair(t, 13, mode, 64, func(p *memlink.Port) roce.Link {
			l := &lendLink{Port: p}
			links = append(links, l)
			return l
		})
		nodes := b.Nodes
		qa, qb := b.PairQPs(rcOpts{Timeout: 14})
		const size = 64 << 10
		la, src := nodes[0].Reg(t, size, 0, 1)
		rb, dst := nodes[1].Reg(t, size, mr.AccessRemoteWrite|mr.AccessRemoteRead|mr.AccessLocalWrite, 2)
		wait := func(cq *roce.CQ, what string) {
			t.Helper()
			var wc [1]verbs.WC
			if n, err := cq.WaitTimeout(wc[:], 10*time.Second); n != 1 || wc[0].Status != verbs.WCSuccess {
				t.Fatalf("%s: %d completions, %v, %v", what, n, wc[0].Status, err)
			}
		}
		if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{la.SGE(0, size)}, RemoteAddr: rb.Addr(), RKey: rb.RKey()}); err != nil {
			t.Fatal(err)
		}
		wait(nodes[0].SCQ, "the WRITE")
		if !bytes.Equal(src, dst) {
			t.Fatal("the WRITE's data arrived damaged")
		}
		for i := range src {
			src[i] = 0
		}
		if err := qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
			SGL: []mr.SGE{la.SGE(0, size)}, RemoteAddr: rb.Addr(), RKey: rb.RKey()}); err != nil {
			t.Fatal(err)
		}
		wait(nodes[0].SCQ, "the READ")
		if !bytes.Equal(src, dst) {
			t.Fatal("the READ's data arrived damaged")
		}
		if err := qb.PostRecv(&verbs.RecvWR{WRID: 3, SGL: []mr.SGE{rb.SGE(0, 4000)}}); err != nil {
			t.Fatal(err)
		}
		copy(src, bytes.Repeat([]byte{7}, 4000))
		if err := qa.PostSend(&verbs.SendWR{WRID: 4, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{la.SGE(0, 4000)}}); err != nil {
			t.Fatal(err)
		}
		wait(nodes[1].RCQ, "the SEND's receive")
		wait(nodes[0].SCQ, "the SEND")
		if !bytes.Equal(src[:4000], dst[:4000]) {
			t.Fatal("the SEND's data arrived damaged")
		}
		for i, l := range links {
			nodes[i].Dev.Close()
			if l.lends == 0 || l.lends != l.release || l.out != 0 {
				t.Errorf("device %d: %d lends, %d releases, %d frames out", i, l.lends, l.release, l.out)
			}
			if l.submitted == 0 || len(l.txOut) != 0 || len(l.txFree) != lendTxBufs || l.txErr != "" {
				t.Errorf("device %d: %d frames sent in lent buffers, %d buffers still lent, %d of %d free; %s",
					i, l.submitted, len(l.txOut), len(l.txFree), lendTxBufs, l.txErr)
			}
		}
	})
}
