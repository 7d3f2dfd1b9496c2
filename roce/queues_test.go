package roce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// twoEngines opens a device on two ports of an in-memory router, one
// engine each, in virtual time.
func twoEngines(t testing.TB) *Device {
	t.Helper()
	clock := &memlink.VirtualClock{}
	r := memlink.NewRouter(clock, 1, memlink.Impairments{})
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	gid := bth.GIDFromAddr(netip.MustParseAddr("192.0.2.1"))
	d, err := OpenLinks([]Link{r.NewPort(mac, 1500), r.NewPort(mac, 1500)}, &Options{Clock: clock, GIDs: []bth.GID{gid}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.Engines() != 2 {
		t.Fatalf("%d engines", d.Engines())
	}
	return d
}

// TestControlDoesNotWaitForEngines holds every engine lock, as engines in
// the middle of a batch do, and runs the control calls: none of them may
// wait for it.
func TestControlDoesNotWaitForEngines(t *testing.T) {
	d := twoEngines(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	attr := smallQP(verbs.QPTypeRC, cq)
	q0, err := pd.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range d.eng {
		e.mu.Lock()
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			q, err := pd.CreateQP(attr)
			if err != nil {
				return err
			}
			if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite},
				verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
				return err
			}
			if a, _ := q.Query(); a.State != verbs.QPStateInit {
				t.Errorf("state %v after the modify", a.State)
			}
			if _, err := pd.RegMR(make([]byte, 4096), mr.AccessLocalWrite); err != nil {
				return err
			}
			if _, err := d.CreateCQ(16, nil); err != nil {
				return err
			}
			d.Query()
			d.QueryPort()
			if _, err := d.QueryGID(0); err != nil {
				return err
			}
			q0.Outstanding()
			if err := q0.Destroy(); err != nil {
				return err
			}
			return q.Destroy()
		}()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Error("control calls still waiting for the engines 10s after they started")
	}
	for _, e := range d.eng {
		e.mu.Unlock()
	}
}

// TestQPsSpreadOverEngines checks that QPs go to engines by QP number and
// QPs on a shared receive queue to the SRQ's engine.
func TestQPsSpreadOverEngines(t *testing.T) {
	d := twoEngines(t)
	pd, cq := pdAndCQ(d)
	attr := smallQP(verbs.QPTypeRC, cq)
	for i := 0; i < 4; i++ {
		q, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatal(err)
		}
		if q.Engine() != int(q.QPN())%2 {
			t.Errorf("QP %d on engine %d", q.QPN(), q.Engine())
		}
	}
	srq, err := pd.CreateSRQ(8, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	sattr := *attr
	sattr.SRQ = srq
	for i := 0; i < 3; i++ {
		q, err := pd.CreateQP(&sattr)
		if err != nil {
			t.Fatal(err)
		}
		if q.Engine() != srq.eng.idx {
			t.Errorf("QP %d on engine %d, its SRQ on %d", q.QPN(), q.Engine(), srq.eng.idx)
		}
	}
	st := d.EngineStats()
	if st[0].QPs+st[1].QPs != 7 || st[0].QPs == 0 || st[1].QPs == 0 {
		t.Errorf("QPs by engine: %d, %d", st[0].QPs, st[1].QPs)
	}
}

// TestHandoffFull fills the ring from engine 0 to engine 1: what does not
// fit is dropped and counted, and the ring takes frames again once the
// owner has taken its frames.
func TestHandoffFull(t *testing.T) {
	d := twoEngines(t)
	e0, e1 := d.eng[0], d.eng[1]
	frame := make([]byte, 100)
	e0.mu.Lock()
	for i := 0; i < handoffSlots+44; i++ {
		e0.handOff(e1, frame)
	}
	e0.wakeHanded()
	st := e0.st
	e0.mu.Unlock()
	if st.HandedOff != handoffSlots || st.HandoffFull != 44 {
		t.Fatalf("handed over %d, dropped %d; want %d and 44", st.HandedOff, st.HandoffFull, handoffSlots)
	}
	if !e1.dbRung.Load() || !e1.inboxReady() {
		t.Fatal("engine 1 was not told of the frames")
	}
	for d.Step(0) {
	}
	s := d.EngineStats()
	// The frames are not RoCE: engine 1 takes them and counts them
	// malformed.
	if s[1].Adopted != handoffSlots || d.Counter(verbs.CntMalformed) != handoffSlots {
		t.Errorf("engine 1 took %d frames, %d malformed; want %d", s[1].Adopted, d.Counter(verbs.CntMalformed), handoffSlots)
	}
	e0.mu.Lock()
	e0.handOff(e1, frame)
	st = e0.st
	e0.mu.Unlock()
	if st.HandedOff != handoffSlots+1 || st.HandoffFull != 44 {
		t.Errorf("after the drain: handed over %d, dropped %d", st.HandedOff, st.HandoffFull)
	}
}

// TestCloseStopsEveryEngine starts a device of three engines in real time
// in each mode and closes it: every engine's goroutine must be gone when
// Close returns.
func TestCloseStopsEveryEngine(t *testing.T) {
	for _, m := range []EngineMode{EngineInline, EngineSleep, EngineSpin, EngineAdaptive} {
		clock := SystemClock()
		r := memlink.NewRouter(clock, 1, memlink.Impairments{})
		mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
		links := []Link{r.NewPort(mac, 1500), r.NewPort(mac, 1500), r.NewPort(mac, 1500)}
		d, err := OpenLinks(links, &Options{Clock: clock, Engine: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for engineLoops() < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if n := engineLoops(); n != 3 {
			t.Errorf("%v: %d engine loops running, want 3", m, n)
		}
		if err := d.Close(); err != nil {
			t.Errorf("%v: Close: %v", m, err)
		}
		if n := engineLoops(); n != 0 {
			t.Errorf("%v: %d engine loops still running after Close", m, n)
		}
	}
}

// engineLoops counts the goroutines running an engine's loop.
func engineLoops() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return bytes.Count(buf[:n], []byte("roce.(*engine).run("))
}

// TestLiveQPList creates QPs and QP1 and destroys them in a shuffled
// order: at every point the device's live list holds exactly the QPs that
// exist, each at the place it records, which is what the counters, the
// engine statistics and a port going down look at.
func TestLiveQPList(t *testing.T) {
	d := twoEngines(t)
	pd, cq := pdAndCQ(d)
	attr := smallQP(verbs.QPTypeUD, cq)
	exist := map[*QP]bool{}
	var all []*QP
	for i := 0; i < 40; i++ {
		q, err := pd.CreateQP(attr)
		if err != nil {
			t.Fatal(err)
		}
		exist[q], all = true, append(all, q)
	}
	gattr := *attr
	gattr.Type = verbs.QPTypeGSI
	gsi, err := pd.CreateQP(&gattr)
	if err != nil {
		t.Fatal(err)
	}
	exist[gsi], all = true, append(all, gsi)
	check := func(when string) {
		t.Helper()
		live := d.liveQPs()
		if len(live) != len(exist) {
			t.Fatalf("%s: %d QPs listed, %d exist", when, len(live), len(exist))
		}
		for i, q := range live {
			if !exist[q] || q.liveIx != i {
				t.Fatalf("%s: entry %d is QP %d (exists %v, records place %d)", when, i, q.QPN(), exist[q], q.liveIx)
			}
		}
		st := d.EngineStats()
		if st[0].QPs+st[1].QPs != len(exist) {
			t.Fatalf("%s: engine statistics count %d QPs, %d exist", when, st[0].QPs+st[1].QPs, len(exist))
		}
	}
	check("after creating")
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for k, q := range all {
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
		delete(exist, q)
		check(fmt.Sprintf("after destroying %d", k+1))
	}
}

// BenchmarkCounter is the cost of reading one device counter with two
// QPs, as a program that watches memory a WRITE fills does on every poll
// (perftest's write_lat).
func BenchmarkCounter(b *testing.B) {
	d := twoEngines(b)
	pd, cq := pdAndCQ(d)
	attr := smallQP(verbs.QPTypeRC, cq)
	for i := 0; i < 2; i++ {
		if _, err := pd.CreateQP(attr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		d.Counter(verbs.CntRcvdPkts)
	}
}

// smallQP is the attributes of a QP of type typ on cq with four work
// requests of one SGE each way.
func smallQP(typ verbs.QPType, cq *CQ) *QPInitAttr {
	return &QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// pdAndCQ allocates a PD and a 16-entry CQ on d.
func pdAndCQ(d *Device) (*PD, *CQ) {
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16, nil)
	return pd, cq
}
