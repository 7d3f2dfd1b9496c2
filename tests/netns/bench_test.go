package netns

// Benchmarks of sroce over a veth pair between two network namespaces,
// against the ceiling of this machine: raw AF_XDP sockets moving frames of
// the same size over the same kind of veth, with nothing else to do.
//
//	go test -run '^$' -bench Sroce -benchtime 2s ./tests/netns
//
// prints the usual benchmark lines and then a table with sroce's rate as a
// fraction of the ceiling's, one sroce row per engine mode (sleep, spin,
// adaptive, inline; SROCE_BENCH_ENGINES narrows the list). The figures in
// README.md come from it. SROCE_BENCH_TAP=1 puts a frame tap on both
// ports' links, as `sroce demo -v` does. No test asserts on timing: this
// machine is shared and noisy.

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
	"github.com/sroce/sroce/xdp"
)

// RoCEv2 frame sizes over IPv4 (Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4).
const (
	srFrameWriteMid1024 = 14 + 20 + 8 + 12 + 1024 + 4   // RDMA WRITE middle at path MTU 1024
	srFrameWriteMid4096 = 14 + 20 + 8 + 12 + 4096 + 4   // ... at path MTU 4096
	srFrameWrite8       = 14 + 20 + 8 + 12 + 16 + 8 + 4 // RDMA WRITE ONLY of 8 bytes (with RETH)
	srFrameSend8        = 14 + 20 + 8 + 12 + 8 + 4      // SEND ONLY of 8 bytes
)

// srBenchRow is one line of the summary table.
type srBenchRow struct {
	name     string
	value    float64 // in unit
	unit     string
	pps      float64 // packet rate (0 for latency rows)
	ceiling  string  // the ceiling row it is compared with
	fraction float64 // sroce / ceiling (inverse ratio for latency)
	cpu      float64 // process CPU time per message or round trip, microseconds (both ends)
}

var srBench struct {
	mu   sync.Mutex
	rows map[string]*srBenchRow
}

// srRecord keeps the last result of a benchmark for the table.
func srRecord(r srBenchRow) {
	srBench.mu.Lock()
	defer srBench.mu.Unlock()
	if srBench.rows == nil {
		srBench.rows = map[string]*srBenchRow{}
	}
	srBench.rows[r.name] = &r
}

func BenchmarkSroce(b *testing.B) {
	srSkip(b)
	engines := srBenchEngines(b)
	each := func(name string, f func(b *testing.B, e roce.EngineMode)) {
		for _, e := range engines {
			b.Run(strings.Replace(name, "/", "/engine="+e.String()+"/", 1), func(b *testing.B) { f(b, e) })
		}
	}
	b.Run("ceiling-blast/mtu=1500/frame=1082", func(b *testing.B) { srRawBlast(b, 1500, srFrameWriteMid1024) })
	each("write-bw/mtu=1500/size=65536", func(b *testing.B, e roce.EngineMode) {
		srWriteBW(b, e, 1500, 65536, "ceiling-blast/mtu=1500/frame=1082")
	})
	b.Run("ceiling-blast/mtu=9000/frame=4154", func(b *testing.B) { srRawBlast(b, 9000, srFrameWriteMid4096) })
	each("write-bw/mtu=9000/size=65536", func(b *testing.B, e roce.EngineMode) {
		srWriteBW(b, e, 9000, 65536, "ceiling-blast/mtu=9000/frame=4154")
	})
	b.Run("ceiling-blast/mtu=1500/frame=82", func(b *testing.B) { srRawBlast(b, 1500, srFrameWrite8) })
	each("write-rate/mtu=1500/size=8", func(b *testing.B, e roce.EngineMode) {
		srWriteBW(b, e, 1500, 8, "ceiling-blast/mtu=1500/frame=82")
	})
	b.Run("ceiling-pingpong/mtu=1500/frame=66", func(b *testing.B) { srRawPingPong(b, 1500, srFrameSend8) })
	each("send-lat/mtu=1500/size=8", func(b *testing.B, e roce.EngineMode) {
		srSendLat(b, e, 1500, 8, "ceiling-pingpong/mtu=1500/frame=66")
	})
	srPrintTable(os.Stdout)
}

// srBenchEngines returns the engine modes of SROCE_BENCH_ENGINES, or all.
func srBenchEngines(b *testing.B) []roce.EngineMode {
	v := os.Getenv("SROCE_BENCH_ENGINES")
	if v == "" {
		return []roce.EngineMode{roce.EngineSleep, roce.EngineSpin, roce.EngineAdaptive, roce.EngineInline}
	}
	var out []roce.EngineMode
	for _, n := range strings.Split(v, ",") {
		m, err := roce.ParseEngineMode(n)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// srBenchTap reports whether SROCE_BENCH_TAP asks for tapped links.
func srBenchTap() bool { return os.Getenv("SROCE_BENCH_TAP") == "1" }

// srPrintTable prints the sroce rows next to their ceilings.
func srPrintTable(w *os.File) {
	srBench.mu.Lock()
	defer srBench.mu.Unlock()
	if len(srBench.rows) == 0 {
		return
	}
	var names []string
	for n, r := range srBench.rows {
		if r.ceiling != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "\nsroce over veth vs the raw AF_XDP ceiling (copy mode, this machine)")
	fmt.Fprintln(tw, "benchmark\tsroce\tsroce pkt/s\tceiling (raw AF_XDP)\t\tsroce/ceiling\tCPU us per msg (both ends)\t")
	for _, n := range names {
		r := srBench.rows[n]
		c := srBench.rows[r.ceiling]
		if c == nil {
			continue
		}
		frac := r.pps / c.pps
		cv := fmt.Sprintf("%.0f pkt/s", c.pps)
		if r.pps == 0 { // latency: the ceiling's round trip over sroce's
			frac = c.value / r.value
			cv = fmt.Sprintf("%.1f %s", c.value, c.unit)
		}
		pps := "-"
		if r.pps > 0 {
			pps = fmt.Sprintf("%.0f", r.pps)
		}
		kind, _, _ := strings.Cut(r.ceiling, "/")
		_, frame, _ := strings.Cut(r.ceiling, "frame=")
		what := fmt.Sprintf("%s, %s-byte frames", strings.TrimPrefix(kind, "ceiling-"), frame)
		fmt.Fprintf(tw, "%s\t%.2f %s\t%s\t%s\t%s\t%.0f%%\t%.2f\t\n", n, r.value, r.unit, pps, what, cv, 100*frac, r.cpu)
	}
	tw.Flush()
}

// srRawPair opens one AF_XDP socket on each end of a fresh veth pair.
func srRawPair(b *testing.B, mtu int) (p *nsutil.Pair, a, c *xdp.Socket) {
	b.Helper()
	p, err := nsutil.NewPair(nsutil.PairConfig{Prefix: srPrefix, Veth: nsutil.VethConfig{MTU: mtu}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	open := func(ns *nsutil.Namespace, ifname string) *xdp.Socket {
		var s *xdp.Socket
		if err := ns.Do(func() (err error) {
			s, err = xdp.Open(ifname, 0, xdp.Options{})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	return p, open(p.A, p.Veth.NameA), open(p.B, p.Veth.NameB)
}

// srRawFrame builds an IPv4/UDP frame to port 4791 of size bytes.
func srRawFrame(size int, srcMAC, dstMAC net.HardwareAddr, src, dst [4]byte) []byte {
	f := make([]byte, size)
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	binary.BigEndian.PutUint16(ip[4:], 1)
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 64, 17
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], bth.IPv4Checksum(ip))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], 0xc000)
	binary.BigEndian.PutUint16(udp[2:], 4791)
	binary.BigEndian.PutUint16(udp[4:], uint16(size-34))
	return f
}

// srRawBlast is the ceiling of one-way packet rate: A transmits frames of
// size bytes as fast as its socket takes them, B receives them without
// copying. One op is one frame received.
func srRawBlast(b *testing.B, mtu, size int) {
	p, tx, rx := srRawPair(b, mtu)
	f := srRawFrame(size, p.Veth.MACA, p.Veth.MACB, nsutil.DefaultAddrA.Addr().As4(), nsutil.DefaultAddrB.Addr().As4())
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = f
	}
	var stop atomic.Bool
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		frames := make([]xdp.Frame, 64)
		for !stop.Load() {
			n, _ := rx.Receive(frames)
			if n == 0 {
				rx.Wait(time.Millisecond)
				continue
			}
			rx.Release(frames[:n])
			got.Add(int64(n))
		}
	}()
	b.ResetTimer()
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for got.Load() < int64(b.N) && time.Now().Before(deadline) {
		if n, _ := tx.Transmit(batch); n == 0 {
			tx.Flush()
		}
	}
	el := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	rx.Wake()
	<-done
	pps := float64(got.Load()) / el.Seconds()
	b.ReportMetric(pps/1e6, "Mpps")
	b.ReportMetric(pps*float64(size)*8/1e9, "Gbit/s")
	srRecord(srBenchRow{name: b.Name()[len("BenchmarkSroce/"):], value: pps / 1e6, unit: "Mpps", pps: pps})
}

// srRawPingPong is the ceiling of round-trip latency: one frame bounced
// between the sockets, both ends blocking in Wait as the engine's loop does.
// One op is one round trip.
func srRawPingPong(b *testing.B, mtu, size int) {
	p, a, c := srRawPair(b, mtu)
	ping := [][]byte{srRawFrame(size, p.Veth.MACA, p.Veth.MACB, nsutil.DefaultAddrA.Addr().As4(), nsutil.DefaultAddrB.Addr().As4())}
	pong := [][]byte{srRawFrame(size, p.Veth.MACB, p.Veth.MACA, nsutil.DefaultAddrB.Addr().As4(), nsutil.DefaultAddrA.Addr().As4())}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		frames := make([]xdp.Frame, 8)
		for !stop.Load() {
			n, _ := c.Receive(frames)
			if n == 0 {
				c.Wait(10 * time.Millisecond)
				continue
			}
			c.Release(frames[:n])
			for i := 0; i < n; i++ {
				c.Transmit(pong)
			}
		}
	}()
	frames := make([]xdp.Frame, 8)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		a.Transmit(ping)
		for got := 0; got == 0; {
			n, _ := a.Receive(frames)
			if n == 0 {
				if ready, _ := a.Wait(time.Second); !ready {
					b.Fatalf("pong %d lost", i)
				}
				continue
			}
			a.Release(frames[:n])
			got = n
		}
	}
	el := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	c.Wake()
	<-done
	rtt := float64(el.Microseconds()) / float64(b.N)
	b.ReportMetric(rtt, "us-rtt")
	srRecord(srBenchRow{name: b.Name()[len("BenchmarkSroce/"):], value: rtt, unit: "us RTT"})
}

// srWriteBW is write-bw (ib_write_bw): RDMA WRITEs of size bytes from A to
// B with up to 128 outstanding (perftest's tx depth), every 16th signaled.
// One op is one message.
func srWriteBW(b *testing.B, engine roce.EngineMode, mtu, size int, ceiling string) {
	r := newSrRig(b, srConfig{mode: iface.ModeXDP, mtu: mtu, sendWR: 256, memSize: max(size, 4096), engine: engine, tap: srBenchTap()})
	a := r.a
	const depth, every = 128, 16
	wr := verbs.SendWR{Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.mr.SGE(0, size)},
		RemoteAddr: r.b.mr.Addr(), RKey: r.b.mr.RKey()}
	wcs := make([]verbs.WC, 32)
	sent0 := r.a.stat("sent_pkts")
	b.SetBytes(int64(size))
	b.ResetTimer()
	cpu0 := srCPU(b)
	start := time.Now()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			wr.WRID = uint64(posted)
			wr.Flags = 0
			if posted%every == every-1 || posted == b.N-1 {
				wr.Flags = verbs.Signaled
			}
			if err := a.qp.PostSend(&wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n, err := a.scq.WaitTimeout(wcs, 10*time.Second)
		if err != nil {
			b.Fatalf("no completion: %v (%d of %d done)", err, done, b.N)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("WRITE %d: %v", wc.WRID, wc.Status)
			}
			done = int(wc.WRID) + 1
		}
	}
	el := time.Since(start)
	cpu := srCPU(b) - cpu0
	b.StopTimer()
	pkts := float64(r.a.stat("sent_pkts") - sent0)
	pps := pkts / el.Seconds()
	gbps := float64(b.N) * float64(size) * 8 / el.Seconds() / 1e9
	b.ReportMetric(gbps, "Gbit/s")
	b.ReportMetric(pps/1e6, "Mpps")
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mmsg/s")
	if n := r.a.stat("retransmit_pkts"); n > 0 {
		b.ReportMetric(float64(n), "retransmits")
	}
	cpuPer := float64(cpu.Microseconds()) / float64(b.N)
	b.ReportMetric(cpuPer, "cpu-us/msg")
	row := srBenchRow{name: b.Name()[len("BenchmarkSroce/"):], pps: pps, ceiling: ceiling, cpu: cpuPer}
	if size >= 1024 {
		row.value, row.unit = gbps, "Gbit/s"
	} else {
		row.value, row.unit = float64(b.N)/el.Seconds()/1e6, "Mmsg/s"
	}
	srRecord(row)
}

// srSendLat is send-lat (ib_send_lat): A SENDs size bytes, B answers with a
// SEND of the same size when it gets it; both poll their CQs as perftest
// does (busy, without blocking). One op is one round trip; perftest
// reports half of it as the latency.
func srSendLat(b *testing.B, engine roce.EngineMode, mtu, size int, ceiling string) {
	r := newSrRig(b, srConfig{mode: iface.ModeXDP, mtu: mtu, engine: engine, tap: srBenchTap()})
	a, c := r.a, r.b
	const pre = 256
	for _, s := range []*srSide{a, c} {
		for i := 0; i < pre; i++ {
			if err := s.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{s.mr.SGE(size, size)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	send := func(s *srSide) {
		if err := s.qp.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{s.mr.SGE(0, size)}}); err != nil {
			b.Fatal(err)
		}
	}
	recv := func(s *srSide) {
		var wc [1]verbs.WC
		if n, err := srBusyPoll(s.rcq, wc[:], 5*time.Second); n != 1 || wc[0].Status != verbs.WCSuccess {
			b.Fatalf("%s: receive: %v %v", s.name, err, wc[0].Status)
		}
		if err := s.qp.PostRecv(&verbs.RecvWR{SGL: []mr.SGE{s.mr.SGE(size, size)}}); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var wc [1]verbs.WC
			n, _ := srBusyPoll(c.rcq, wc[:], 50*time.Millisecond)
			if n == 0 {
				continue
			}
			c.qp.PostRecv(&verbs.RecvWR{SGL: []mr.SGE{c.mr.SGE(size, size)}})
			send(c)
		}
	}()
	b.ResetTimer()
	cpu0 := srCPU(b)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		send(a)
		recv(a)
	}
	el := time.Since(start)
	cpu := srCPU(b) - cpu0
	b.StopTimer()
	close(stop)
	<-done
	rtt := float64(el.Microseconds()) / float64(b.N)
	b.ReportMetric(rtt/2, "us-one-way")
	b.ReportMetric(rtt, "us-rtt")
	cpuPer := float64(cpu.Microseconds()) / float64(b.N)
	b.ReportMetric(cpuPer, "cpu-us/rtt")
	srRecord(srBenchRow{name: b.Name()[len("BenchmarkSroce/"):], value: rtt, unit: "us RTT", ceiling: ceiling, cpu: cpuPer})
}

// srBusyPoll polls cq without blocking until a completion arrives, as
// perftest's latency tools do, for at most timeout.
func srBusyPoll(cq *roce.CQ, wcs []verbs.WC, timeout time.Duration) (int, error) {
	start := time.Now()
	for i := 0; ; i++ {
		if n := cq.Poll(wcs); n > 0 {
			return n, nil
		}
		if i%1024 == 1023 {
			if time.Since(start) > timeout {
				return 0, fmt.Errorf("no completion in %v", timeout)
			}
			runtime.Gosched()
		}
	}
}

// srCPU returns the CPU time the process has used, user and system.
func srCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
