package netns

// The sroce-to-sroce rig: two network namespaces joined by a veth pair
// (nsutil), a sroce port in each (roce/iface, AF_XDP or the UDP link), and
// an RC QP on each side connected to the other, in this process. The tests
// of sroce_*_test.go and the benchmarks build on it. Everything it creates
// is removed by t.Cleanup, and srLeakCheck verifies that nothing stays:
// namespaces, XDP programs, file descriptors.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
	"github.com/sroce/sroce/xdp"
)

// srPrefix is the namespace prefix of the rig.
const srPrefix = "sroce-t"

// srConfig describes a rig.
type srConfig struct {
	mode    iface.Mode    // link of both ports (default ModeXDP)
	mtu     int           // veth MTU (default 1500)
	netem   *nsutil.Netem // impairment of the veth, both directions
	xdpB    xdp.Options   // socket options of B's AF_XDP link
	memSize int           // bytes of registered memory per side (default 1 MiB)
	sendWR  int           // send queue depth (default 256)
	timeout uint8         // RC retransmit timeout attribute (default 12: 16.8 ms)
	retry   uint8         // RC retry_cnt (default 6; 7, retry forever, with netem)
	engine  roce.EngineMode
	// tap wraps both ports' links in a frame tap (iface.Options.Tap),
	// as `sroce demo -v` does; the tap only counts frames.
	tap bool
}

// srSide is one end of the rig.
type srSide struct {
	name   string
	ns     *nsutil.Namespace
	ifname string
	port   *iface.Port
	pd     *roce.PD
	scq    *roce.CQ
	rcq    *roce.CQ
	mr     *roce.MR
	qp     *roce.QP
	gidIdx int
	gid    bth.GID
	psn    bth.PSN
	tapped atomic.Int64 // frames the tap saw (srConfig.tap), on the port's loops
}

// srRig is two connected sides.
type srRig struct {
	tb   testing.TB
	cfg  srConfig
	pair *nsutil.Pair
	a, b *srSide
}

// srSkip skips unless namespaces and AF_XDP can be used.
func srSkip(tb testing.TB) {
	tb.Helper()
	nsutil.Skip(tb)
}

// newSrRig builds the rig and registers its cleanup.
func newSrRig(tb testing.TB, cfg srConfig) *srRig {
	tb.Helper()
	srSkip(tb)
	if cfg.mode == "" {
		cfg.mode = iface.ModeXDP
	}
	if cfg.mtu == 0 {
		cfg.mtu = 1500
	}
	if cfg.memSize == 0 {
		cfg.memSize = 1 << 20
	}
	if cfg.sendWR == 0 {
		cfg.sendWR = 256
	}
	if cfg.timeout == 0 {
		cfg.timeout = 12
	}
	if cfg.retry == 0 {
		// Like rdma_rxe, a NAK that acknowledges part of a message does
		// not restore the retry budget, so heavy reordering can spend a
		// finite one: impaired links retry forever, as ibv_rc_pingpong
		// does; clean ones give up after 6 retries (a vanished peer).
		cfg.retry = 6
		if cfg.netem != nil {
			cfg.retry = 7
		}
	}
	pc := nsutil.PairConfig{Prefix: srPrefix, Veth: nsutil.VethConfig{MTU: cfg.mtu}, Impair: cfg.netem}
	if cfg.netem != nil && cfg.mode == iface.ModeXDP {
		// AF_XDP copy-mode transmit goes straight to the driver, past any
		// qdisc: only the forwarder impairs it.
		pc.ImpairWith = nsutil.ImpairForwarder
	}
	pair, err := nsutil.NewPair(pc)
	if errors.Is(err, nsutil.ErrNoNetem) || errors.Is(err, nsutil.ErrNoTC) {
		tb.Skipf("no impairment possible here: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	r := &srRig{tb: tb, cfg: cfg, pair: pair}
	tb.Cleanup(func() { r.close() })
	r.a = r.open("A", pair.A, pair.Veth.NameA, xdp.Options{})
	r.b = r.open("B", pair.B, pair.Veth.NameB, cfg.xdpB)
	r.a.setup(tb, &cfg)
	r.b.setup(tb, &cfg)
	r.connect(r.a, r.b)
	r.connect(r.b, r.a)
	return r
}

// open opens a port in ns.
func (r *srRig) open(name string, ns *nsutil.Namespace, ifname string, xo xdp.Options) *srSide {
	r.tb.Helper()
	s := &srSide{name: name, ns: ns, ifname: ifname}
	err := ns.Do(func() (err error) {
		o := iface.Options{Mode: r.cfg.mode, XDP: xo, Engine: r.cfg.engine}
		if r.cfg.tap {
			o.Tap = func(iface.Direction, []byte) { s.tapped.Add(1) }
		}
		s.port, err = iface.Open(context.Background(), ifname, o)
		return err
	})
	if err != nil {
		r.tb.Fatalf("%s: %v", name, err)
	}
	return s
}

// close closes the ports and removes the namespaces.
func (r *srRig) close() {
	for _, s := range []*srSide{r.a, r.b} {
		if s != nil && s.port != nil {
			s.port.Close()
		}
	}
	if r.pair != nil {
		if err := r.pair.Close(); err != nil {
			r.tb.Errorf("removing the namespaces: %v", err)
		}
	}
}

// setup creates the PD, CQs, memory and QP of a side.
func (s *srSide) setup(tb testing.TB, cfg *srConfig) {
	tb.Helper()
	dev := s.port.Device()
	var err error
	must := func(what string, err error) {
		if err != nil {
			tb.Fatalf("%s: %s: %v", s.name, what, err)
		}
	}
	s.pd, err = dev.AllocPD()
	must("alloc PD", err)
	s.scq, err = dev.CreateCQ(cfg.sendWR+64, nil)
	must("create CQ", err)
	s.rcq, err = dev.CreateCQ(1024, nil)
	must("create CQ", err)
	s.mr, err = s.pd.RegMR(make([]byte, cfg.memSize),
		mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead|mr.AccessRemoteAtomic)
	must("register memory", err)
	s.qp, err = s.pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: uint32(cfg.sendWR), MaxRecvWR: 512, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must("create QP", err)
	s.gidIdx = s.port.DefaultGIDIndex()
	s.gid, err = s.port.GID(s.gidIdx)
	must("GID", err)
	s.psn = bth.PSN(rand.Uint32() & 0xffffff)
}

// connect moves s's QP to RTS towards peer.
func (r *srRig) connect(s, peer *srSide) {
	r.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ah, err := s.port.AHAttr(ctx, peer.gid, s.gidIdx)
	if err != nil {
		r.tb.Fatalf("%s: %v", s.name, err)
	}
	mtu := min(s.port.ActiveMTU(), peer.port.ActiveMTU())
	for _, st := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1,
			AccessFlags: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: mtu, DestQPN: peer.qp.QPN(), RQPSN: peer.psn, AH: ah,
			MaxDestRdAtomic: 16, MinRNRTimer: 12},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: s.psn, Timeout: r.cfg.timeout, RetryCnt: r.cfg.retry, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	} {
		if err := s.qp.Modify(&st.attr, st.mask); err != nil {
			r.tb.Fatalf("%s: modify to %v: %v", s.name, st.attr.State, err)
		}
	}
}

// wait returns the next completion of cq within d, or an error that says
// why there is none (port lost, timeout).
func (s *srSide) wait(cq *roce.CQ, d time.Duration) (verbs.WC, error) {
	var wc [1]verbs.WC
	deadline := time.Now().Add(d)
	for {
		n, _ := cq.WaitTimeout(wc[:], 20*time.Millisecond)
		if n == 1 {
			return wc[0], nil
		}
		select {
		case <-s.port.Lost():
			return wc[0], s.port.Err()
		default:
		}
		if time.Now().After(deadline) {
			return wc[0], fmt.Errorf("%s: no completion within %v", s.name, d)
		}
	}
}

// mustWait is wait that fails the test unless the completion is a
// success of the wanted opcode.
func (s *srSide) mustWait(tb testing.TB, cq *roce.CQ, want verbs.WCOpcode) verbs.WC {
	tb.Helper()
	wc, err := s.wait(cq, 30*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	if wc.Status != verbs.WCSuccess || wc.Opcode != want {
		tb.Fatalf("%s: completion %v %v, want %v success", s.name, wc.Opcode, wc.Status, want)
	}
	return wc
}

// stat returns a counter of the side's port.
func (s *srSide) stat(name string) uint64 {
	v, _ := s.port.Stat(name)
	return v
}

// srLeakCheck records the process's open file descriptors and, when the
// test ends (after every other cleanup), checks that the rig's namespaces
// are gone and that no descriptor was left open.
func srLeakCheck(t *testing.T) {
	t.Helper()
	before := srFDs(t)
	t.Cleanup(func() {
		// Cleanups run last-in first-out: this one was registered before
		// the rig's, so everything else is closed by now.
		if live := nsutil.Live(); len(live) > 0 {
			t.Errorf("namespaces still open: %v", live)
		}
		out, _ := exec.Command("ip", "netns", "list").Output()
		mine := fmt.Sprintf("%s-%d-", srPrefix, os.Getpid())
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, mine) {
				t.Errorf("namespace left behind: %s", l)
			}
		}
		var after map[string]string
		for i := 0; i < 50; i++ {
			after = srFDs(t)
			if len(after) <= len(before) {
				break
			}
			time.Sleep(20 * time.Millisecond) // finalizers, exiting goroutines
		}
		for fd, what := range after {
			if _, ok := before[fd]; !ok {
				t.Errorf("file descriptor %s (%s) left open", fd, what)
			}
		}
	})
}

// srFDs returns the open file descriptors of the process and what they
// are.
func srFDs(t *testing.T) map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, already closed
		}
		m[e.Name()] = target
	}
	return m
}

// srNoXDP fails the test if an XDP program is attached in ns.
func srNoXDP(t *testing.T, ns *nsutil.Namespace) {
	t.Helper()
	out, err := ns.Exec(context.Background(), "ip", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "xdp") {
		t.Errorf("XDP program still attached in %s:\n%s", ns, out)
	}
}
