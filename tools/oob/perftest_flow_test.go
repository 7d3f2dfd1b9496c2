package oob

import (
	"context"
	"fmt"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
	"strings"
	"sync"
	"testing"
	"time"
)

// side runs one side of a perftest exchange with recording hooks.
type side struct {
	conn    *Conn
	flow    Flow
	local   []KeyMsg
	reports map[uint64]BWReport // what Run returns per size

	mu       sync.Mutex
	calls    []string
	remote   []KeyMsg
	rows     []string
	prologue Prologue
	result   Result
	err      error
}

func (s *side) log(format string, args ...any) {
	s.mu.Lock()
	s.calls = append(s.calls, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *side) run(ctx context.Context) error {
	p, err := s.conn.Prologue(ctx, SysData{4096, 64}, verbs.MTU1024)
	if err != nil {
		return err
	}
	s.prologue = p
	s.result, err = s.conn.Run(ctx, s.flow, s.local, Hooks{
		Connect: func(remote []KeyMsg) error { s.log("connect"); s.remote = remote; return nil },
		Ready:   func(remote []KeyMsg) error { s.log("ready"); return nil },
		Prepare: func(size uint64) error { s.log("prepare %d", size); return nil },
		Run: func(size uint64) (BWReport, error) {
			s.log("run %d", size)
			return s.reports[size], nil
		},
		Report: func(size uint64, l, r *BWReport) error {
			row := fmt.Sprintf("size %d", size)
			if l != nil {
				row += fmt.Sprintf(" local %v", l.BWAvg)
			}
			if r != nil {
				row += fmt.Sprintf(" remote %v", r.BWAvg)
			}
			s.rows = append(s.rows, row)
			return nil
		},
	})
	return err
}

func testKeys(n int, qpn uint32) []KeyMsg {
	var ks []KeyMsg
	for i := range n {
		ks = append(ks, KeyMsg{OutReads: 1, QPN: qpn + uint32(i), PSN: 0x100000 + qpn + uint32(i), RKey: 0x1000 + qpn,
			VAddr: 0x7f0000000000 + uint64(i)<<16, GID: bth.GID{10: 0xff, 11: 0xff, 12: 10, 15: byte(qpn)}})
	}
	return ks
}

// TestFlowLoopback runs every tool's exchange between this package's
// client and server over loopback TCP and checks who ran, who printed
// what and that both got the other's keys.
func TestFlowLoopback(t *testing.T) {
	type variant struct {
		name           string
		duplex, runAll bool
		duration       bool
		qps            int
	}
	variants := []variant{{name: "plain", qps: 1}, {name: "2qps", qps: 2}, {name: "duplex", duplex: true, qps: 1},
		{name: "all", runAll: true, qps: 1}, {name: "duplex-all", duplex: true, runAll: true, qps: 1},
		{name: "duration", duration: true, qps: 1}, {name: "duplex-duration", duplex: true, duration: true, qps: 1}}
	for _, test := range Tests {
		for _, v := range variants {
			if !test.IsBW() && (v.duplex || v.qps > 1) {
				continue
			}
			if test == AtomicBW && v.runAll {
				continue
			}
			t.Run(test.String()+"/"+v.name, func(t *testing.T) {
				sizes := []uint64{4096}
				if v.runAll {
					sizes = RunAllSizes(test, false, 0)
				}
				f := Flow{Test: test, Duplex: v.duplex, RunAll: v.runAll, Duration: v.duration, Sizes: sizes}
				reports := func(base float64) map[uint64]BWReport {
					m := map[uint64]BWReport{}
					for i, s := range sizes {
						m[s] = BWReport{Size: s, Iters: 100, BWPeak: base + float64(i), BWAvg: base + float64(i), MsgRate: 1}
					}
					return m
				}
				ln, addr := loopback(t)
				srv := &side{flow: f, local: testKeys(v.qps, 0x20), reports: reports(1000)}
				cli := &side{flow: f, local: testKeys(v.qps, 0x40), reports: reports(2000)}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := AcceptPerftest(ctx, ln, Timeouts{})
					if err != nil {
						srv.err = err
						return
					}
					srv.conn = c
					srv.err = srv.run(ctx)
				}()
				c, err := DialPerftest(ctx, addr, Timeouts{})
				if err != nil {
					t.Fatal(err)
				}
				cli.conn = c
				cli.err = cli.run(ctx)
				wg.Wait()
				if srv.err != nil || cli.err != nil {
					t.Fatalf("server: %v; client: %v", srv.err, cli.err)
				}
				if fmt.Sprint(srv.remote) != fmt.Sprint(cli.local) || fmt.Sprint(cli.remote) != fmt.Sprint(srv.local) ||
					fmt.Sprint(srv.result.Remote) != fmt.Sprint(cli.local) {
					t.Errorf("keys: server got %v, client got %v", srv.remote, cli.remote)
				}
				if srv.prologue.PeerVersion != "6.06" || srv.prologue.MTU != verbs.MTU1024 || cli.prologue.Sys != (SysData{4096, 64}) {
					t.Errorf("prologue %+v", srv.prologue)
				}
				// Who runs which sizes.
				serverRuns := test == SendBW || test == SendLat || test == WriteLat || v.duplex
				runs := func(s *side) int {
					n := 0
					for _, c := range s.calls {
						if strings.HasPrefix(c, "run ") {
							n++
						}
					}
					return n
				}
				wantRuns := len(sizes)
				if v.duplex && !v.runAll && test.IsBW() {
					wantRuns = 1
				}
				if runs(cli) != wantRuns {
					t.Errorf("client ran %d times, want %d: %v", runs(cli), wantRuns, cli.calls)
				}
				if serverRuns && runs(srv) != wantRuns || !serverRuns && runs(srv) != 0 {
					t.Errorf("server ran %d times: %v", runs(srv), srv.calls)
				}
				if cli.calls[0] != "connect" || cli.calls[1] != "ready" {
					t.Errorf("client calls %v", cli.calls)
				}
				// BW rows.
				switch {
				case test == WriteBW || test == ReadBW || test == AtomicBW:
					if !v.duplex {
						last := sizes[len(sizes)-1]
						if srv.result.PeerReport == nil || *srv.result.PeerReport != cli.reports[last] {
							t.Errorf("server got peer report %v, want %v", srv.result.PeerReport, cli.reports[last])
						}
						if len(srv.rows) != 1 || len(cli.rows) != len(sizes) {
							t.Errorf("rows: server %v, client %v", srv.rows, cli.rows)
						}
					} else if len(srv.rows) != wantRuns || !strings.Contains(srv.rows[0], "remote 2000") {
						t.Errorf("duplex rows %v", srv.rows)
					}
				case test == SendBW:
					if len(srv.rows) != len(sizes) || len(cli.rows) != len(sizes) {
						t.Errorf("rows: server %v, client %v", srv.rows, cli.rows)
					}
					if v.duplex && !v.duration && !strings.Contains(cli.rows[0], "remote 1000") {
						t.Errorf("duplex send rows %v", cli.rows)
					}
					if (!v.duplex || v.duration) && strings.Contains(cli.rows[0], "remote") {
						t.Errorf("reports exchanged: %v", cli.rows)
					}
				}
			})
		}
	}
}

// transcriptReport decodes the first report a side sent in a transcript.
func transcriptReport(segs []segment, fromClient bool) (BWReport, bool) {
	var items [][]byte
	for _, s := range segs {
		if s.fromClient == fromClient && len(s.data) == ReportItemSize {
			items = append(items, s.data)
		}
	}
	if len(items) < 5 {
		return BWReport{}, false
	}
	return reportFromItems(items[:5]), true
}

// transcriptKeys returns the first key message each side sent.
func transcriptKeys(t *testing.T, segs []segment, fromClient bool) KeyMsg {
	t.Helper()
	for _, s := range segs {
		if s.fromClient == fromClient && len(s.data) == KeyMsgSizeGID {
			k, err := ParseKeyMsg(s.data, true)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}
	}
	t.Fatal("no key message in transcript")
	return KeyMsg{}
}

// TestFlowReplay plays every captured exchange of the real perftest tools
// against this package, once as client and once as server: this side must
// send exactly the bytes the real tool sent (given the same keys and
// results), in the same order, and end the connection the same way.
func TestFlowReplay(t *testing.T) {
	for _, c := range []struct {
		name string
		flow Flow
		// serverRan: the real server sent a meaningful report (duplex).
		serverRan bool
	}{
		{"write_bw", Flow{Test: WriteBW, Sizes: []uint64{65536}}, false},
		{"read_bw", Flow{Test: ReadBW, Sizes: []uint64{65536}}, false},
		{"atomic_bw", Flow{Test: AtomicBW, Sizes: []uint64{8}}, false},
		{"send_bw", Flow{Test: SendBW, Sizes: []uint64{65536}}, false},
		{"send_bw_ud", Flow{Test: SendBW, Sizes: []uint64{1024}}, false},
		{"write_bw_b", Flow{Test: WriteBW, Duplex: true, Sizes: []uint64{65536}}, true},
		{"send_bw_b", Flow{Test: SendBW, Duplex: true, Sizes: []uint64{65536}}, true},
		{"write_bw_a", Flow{Test: WriteBW, RunAll: true, Sizes: RunAllSizes(WriteBW, false, 1024)}, false},
		{"send_bw_a", Flow{Test: SendBW, RunAll: true, Sizes: RunAllSizes(SendBW, false, 1024)}, false},
		{"send_lat", Flow{Test: SendLat, Sizes: []uint64{2}}, false},
		{"send_lat_a", Flow{Test: SendLat, RunAll: true, Sizes: RunAllSizes(SendLat, false, 1024)}, false},
		{"write_lat", Flow{Test: WriteLat, Sizes: []uint64{2}}, false},
		{"write_lat_D", Flow{Test: WriteLat, Duration: true, Sizes: []uint64{2}}, false},
		{"read_lat", Flow{Test: ReadLat, Sizes: []uint64{2}}, false},
		{"atomic_lat", Flow{Test: AtomicLat, Sizes: []uint64{8}}, false},
	} {
		segs := loadTranscript(t, c.name)
		for _, role := range []Role{Client, Server} {
			t.Run(c.name+"/"+role.String(), func(t *testing.T) {
				us := role == Client
				local := transcriptKeys(t, segs, us)
				peer := transcriptKeys(t, segs, !us)
				rep, _ := transcriptReport(segs, us)
				last := c.flow.Sizes[len(c.flow.Sizes)-1]
				// The peer plays its side; our messages must match the
				// capture, except a unidirectional server's report, which
				// the real server filled with stack garbage (sroce: zeros).
				var steps []step
				for _, s := range segs {
					if s.fromClient == us {
						ignore := len(s.data) == ReportItemSize && !us && !c.serverRan
						steps = append(steps, step{expect: s.data, ignore: ignore})
					} else {
						steps = append(steps, step{send: s.data})
					}
				}
				steps = append(steps, step{eof: true})
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var conn *Conn
				var errc <-chan error
				if us {
					var addr string
					addr, errc = fakeServer(t, steps)
					var err error
					if conn, err = DialPerftest(ctx, addr, Timeouts{}); err != nil {
						t.Fatal(err)
					}
				} else {
					ln, addr := loopback(t)
					errc = fakeClient(addr, steps)
					var err error
					if conn, err = AcceptPerftest(ctx, ln, Timeouts{}); err != nil {
						t.Fatal(err)
					}
				}
				s := &side{conn: conn, flow: c.flow, local: []KeyMsg{local}, reports: map[uint64]BWReport{last: rep}}
				if err := s.run(ctx); err != nil {
					t.Fatal(err)
				}
				waitPeer(t, errc)
				if len(s.remote) != 1 || s.remote[0] != peer {
					t.Errorf("remote keys %v, want %v", s.remote, peer)
				}
				if !us && !c.flow.Duplex && c.flow.Test.IsBW() && c.flow.Test != SendBW {
					want, _ := transcriptReport(segs, true)
					if s.result.PeerReport == nil || *s.result.PeerReport != want {
						t.Errorf("peer report %v, want %v", s.result.PeerReport, want)
					}
				}
			})
		}
	}
}

// perftestPrologue returns the fake peer's side of the prologue.
func perftestPrologue(version string) []step {
	v, _ := MarshalVersion(version)
	return []step{
		{expect: []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")}, {send: v},
		{n: 4}, {send: []byte{0, 0, 0x10, 0}}, {n: 4}, {send: []byte{0, 0, 0, 64}},
		{n: 2}, {send: []byte("3\x00")},
	}
}

func TestPerftestErrors(t *testing.T) {
	ctx := context.Background()
	keys := testKeys(1, 0x30)
	peerKeys, _ := testKeys(1, 0x50)[0].Marshal(true)
	flow := Flow{Test: WriteBW, Sizes: []uint64{65536}}
	runClient := func(t *testing.T, steps []step, to Timeouts) error {
		addr, errc := fakeServer(t, steps)
		c, err := DialPerftest(ctx, addr, to)
		if err != nil {
			t.Fatal(err)
		}
		s := &side{conn: c, flow: flow, local: keys}
		err = s.run(ctx)
		waitPeer(t, errc)
		return err
	}
	var serverTook time.Duration
	runServer := func(t *testing.T, steps []step, to Timeouts) error {
		ln, addr := loopback(t)
		errc := fakeClient(addr, steps)
		c, err := AcceptPerftest(ctx, ln, to)
		if err != nil {
			t.Fatal(err)
		}
		s := &side{conn: c, flow: flow, local: keys}
		start := time.Now()
		err = s.run(ctx)
		serverTook = time.Since(start)
		waitPeer(t, errc)
		return err
	}
	version := []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")

	for _, v := range []string{"6.28", "6.20", "5.60"} {
		t.Run("peer version "+v, func(t *testing.T) {
			err := runClient(t, append(perftestPrologue(v)[:2], step{eof: true}), shortTimeouts)
			wantKind(t, err, ErrVersion)
			if !strings.Contains(err.Error(), `got version "`+v+`"`) {
				t.Errorf("message %q", err)
			}
		})
	}
	t.Run("pingpong client talks to our perftest server", func(t *testing.T) {
		err := runServer(t, []step{{send: []byte(realRCClientMsg)}, {n: 16}, {eof: true}}, shortTimeouts)
		wantKind(t, err, ErrVersion)
	})
	t.Run("peer closes right after connecting", func(t *testing.T) {
		wantKind(t, runClient(t, []step{{close: true}}, shortTimeouts), ErrPeerClosed)
	})
	t.Run("peer closes after the versions", func(t *testing.T) {
		wantKind(t, runClient(t, append(perftestPrologue("6.06")[:2], step{close: true}), shortTimeouts), ErrPeerClosed)
	})
	t.Run("peer closes in the key phase", func(t *testing.T) {
		steps := append(perftestPrologue("6.06"), step{n: KeyMsgSizeGID}, step{send: peerKeys[:50]}, step{close: true})
		wantKind(t, runClient(t, steps, shortTimeouts), ErrPeerClosed)
	})
	t.Run("peer never answers the version", func(t *testing.T) {
		err := runClient(t, []step{{expect: version}, {sleep: time.Second}}, shortTimeouts)
		wantKind(t, err, ErrTimeout)
		if !strings.HasPrefix(err.Error(), "exchange timed out after 300ms waiting for the peer's version message") {
			t.Errorf("message %q", err)
		}
	})
	t.Run("peer never sends its keys", func(t *testing.T) {
		steps := append(perftestPrologue("6.06"), step{n: KeyMsgSizeGID}, step{sleep: time.Second})
		wantKind(t, runClient(t, steps, shortTimeouts), ErrTimeout)
	})
	t.Run("peer sends a malformed key message", func(t *testing.T) {
		bad := append([]byte(nil), peerKeys...)
		bad[10] = 'q'
		steps := append(perftestPrologue("6.06"), step{n: KeyMsgSizeGID}, step{send: bad}, step{eof: true})
		wantKind(t, runClient(t, steps, shortTimeouts), ErrMalformed)
	})
	t.Run("peer sends a 59-byte key message", func(t *testing.T) {
		short, _ := testKeys(1, 0x50)[0].Marshal(false)
		steps := append(perftestPrologue("6.06"), step{n: KeyMsgSizeGID}, step{send: short}, step{close: true})
		wantKind(t, runClient(t, steps, shortTimeouts), ErrPeerClosed)
	})
	t.Run("peer sends a malformed MTU", func(t *testing.T) {
		steps := append(perftestPrologue("6.06")[:6], step{n: 2}, step{send: []byte("x\x00")}, step{eof: true})
		wantKind(t, runClient(t, steps, shortTimeouts), ErrMalformed)
	})
	t.Run("client vanishes during the run", func(t *testing.T) {
		// The server waits in the barrier after the client's run, up to
		// PeerRun, then gives up.
		steps := append(perftestPrologue("6.06")[:0],
			step{send: version}, step{n: 16}, step{send: []byte{0, 0, 0x10, 0}}, step{n: 4},
			step{send: []byte{0, 0, 0, 64}}, step{n: 4}, step{send: []byte("3\x00")}, step{n: 2})
		for range 3 {
			steps = append(steps, step{send: peerKeys}, step{n: KeyMsgSizeGID})
		}
		steps = append(steps, step{sleep: 1200 * time.Millisecond})
		err := runServer(t, steps, shortTimeouts)
		wantKind(t, err, ErrTimeout)
		if d := serverTook; d < 550*time.Millisecond || d > 1100*time.Millisecond {
			t.Errorf("gave up after %v, want the 600ms PeerRun limit", d)
		}
	})
	t.Run("client closes during the run", func(t *testing.T) {
		steps := []step{{send: version}, {n: 16}, {send: []byte{0, 0, 0x10, 0}}, {n: 4},
			{send: []byte{0, 0, 0, 64}}, {n: 4}, {send: []byte("3\x00")}, {n: 2}}
		for range 3 {
			steps = append(steps, step{send: peerKeys}, step{n: KeyMsgSizeGID})
		}
		steps = append(steps, step{close: true})
		wantKind(t, runServer(t, steps, shortTimeouts), ErrPeerClosed)
	})
	t.Run("custom version policy", func(t *testing.T) {
		addr, errc := fakeServer(t, append(perftestPrologue("6.28")[:2], step{n: 4}, step{eof: true}))
		c, _ := DialPerftest(ctx, addr, shortTimeouts)
		c.AcceptVersion = func(string) error { return nil }
		if v, err := c.ExchangeVersions(ctx); err != nil || v != "6.28" || c.PeerVersion() != "6.28" {
			t.Fatalf("got %q, %v", v, err)
		}
		c.ExchangeSysData(ctx, SysData{4096, 64})
		c.Close()
		<-errc
	})
}

func TestFlowArguments(t *testing.T) {
	c := NewConn(nil, Client)
	hooks := Hooks{Connect: func([]KeyMsg) error { return nil }, Run: func(uint64) (BWReport, error) { return BWReport{}, nil }}
	for _, tc := range []struct {
		f     Flow
		local []KeyMsg
		h     Hooks
	}{
		{Flow{Test: WriteBW, Sizes: []uint64{1}}, nil, hooks},
		{Flow{Test: WriteBW}, testKeys(1, 1), hooks},
		{Flow{Test: WriteBW, Sizes: []uint64{1}}, testKeys(1, 1), Hooks{}},
		{Flow{Test: SendLat, Sizes: []uint64{1}}, testKeys(2, 1), hooks},
		{Flow{Test: ReadLat, Duplex: true, Sizes: []uint64{1}}, testKeys(1, 1), hooks},
	} {
		if _, err := c.Run(context.Background(), tc.f, tc.local, tc.h); err == nil {
			t.Errorf("Run(%+v) accepted", tc.f)
		}
	}
	if s := RunAllSizes(SendBW, true, 1024); len(s) != 10 || s[9] != 1024 || s[0] != 2 {
		t.Errorf("UD sizes %v", s)
	}
	if s := RunAllSizes(WriteBW, true, 1024); len(s) != 23 || s[22] != 1<<23 {
		t.Errorf("RC sizes %v", s)
	}
	var names []string
	for _, test := range Tests {
		names = append(names, test.ToolName()+"="+test.String())
	}
	if got := strings.Join(names, " "); got != "ib_send_bw=send-bw ib_write_bw=write-bw ib_read_bw=read-bw ib_atomic_bw=atomic-bw ib_send_lat=send-lat ib_write_lat=write-lat ib_read_lat=read-lat ib_atomic_lat=atomic-lat" {
		t.Errorf("names %s", got)
	}
}
