package oob

// The order of exchanges of each perftest 4.5 tool (read from the main()
// of src/{send,write,read,atomic}_{bw,lat}.c at tag v4.5-0.17 and checked
// against captures between two rxe guests). After the prologue (version,
// cycle buffer, cache line, MTU) every tool passes each QP's KeyMsg twice,
// with a barrier ("K": one more exchange of QP 0's KeyMsg) in between or
// after, then runs; n is the number of QPs (-q, BW tests only):
//
//	write/read/atomic_bw  K x n, connect, K x n, K
//	                      unidirectional: the client runs (-a: every size,
//	                      no exchange in between), then K, reports, finish;
//	                      the server just waits in that K and prints the
//	                      client's report
//	                      -b: K, run, reports, finish; with -a, per size:
//	                      K, run, K, reports (atomic has no -a)
//	send_bw               K x n, connect, K, K x n, then per size: K, run,
//	                      (with -b and without -D: reports), (with -a: K);
//	                      then finish. Both sides run and print.
//	send_lat              K x n, connect, K, K x n, then per size: K, run;
//	                      finish
//	write_lat             K, K x n, connect, K x n, K, then per size: run;
//	                      no finish: both just close
//	read_lat, atomic_lat  K, K x n, connect, K x n, K; the client runs and
//	                      finishes, the server finishes at once (its K
//	                      waits for the client's run)
//
// "finish" is one more K followed by "done" from both sides.

import (
	"context"
	"errors"
	"fmt"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// Test names one of perftest's eight RoCE tools.
type Test int

// The tools, in the order sroce lists them.
const (
	SendBW    Test = iota // ib_send_bw
	WriteBW               // ib_write_bw
	ReadBW                // ib_read_bw
	AtomicBW              // ib_atomic_bw
	SendLat               // ib_send_lat
	WriteLat              // ib_write_lat
	ReadLat               // ib_read_lat
	AtomicLat             // ib_atomic_lat
)

// Verb is perftest's VerbType, the operation a test measures.
type Verb int

// The verbs; their values are perftest's.
const (
	VerbSend   Verb = iota // SEND/RECV
	VerbWrite              // RDMA WRITE
	VerbRead               // RDMA READ
	VerbAtomic             // FETCH_ADD or COMPARE_SWAP
)

// Verb returns the operation t measures.
func (t Test) Verb() Verb {
	switch t {
	case SendBW, SendLat:
		return VerbSend
	case WriteBW, WriteLat:
		return VerbWrite
	case ReadBW, ReadLat:
		return VerbRead
	}
	return VerbAtomic
}

// IsBW reports whether t is a bandwidth test (the others measure latency).
func (t Test) IsBW() bool { return t <= AtomicBW }

// ToolName returns the perftest binary name, e.g. "ib_write_bw".
func (t Test) ToolName() string {
	return "ib_" + t.shortName("_")
}

// String returns sroce's subcommand name, e.g. "write-bw".
func (t Test) String() string { return t.shortName("-") }

// shortName returns "write<sep>bw" and the like.
func (t Test) shortName(sep string) string {
	verb := [...]string{"send", "write", "read", "atomic"}[t.Verb()]
	if t.IsBW() {
		return verb + sep + "bw"
	}
	return verb + sep + "lat"
}

// Tests lists every Test.
var Tests = []Test{SendBW, WriteBW, ReadBW, AtomicBW, SendLat, WriteLat, ReadLat, AtomicLat}

// Flow selects the exchange sequence of one run: which tool, which side,
// and the options that change the sequence.
type Flow struct {
	Test Test
	// Duplex is -b (BW tests only).
	Duplex bool
	// Sizes are the message sizes to run, in order: one for a normal run,
	// RunAllSizes for -a.
	Sizes []uint64
	// RunAll is -a; it adds per-size barriers to some tools.
	RunAll bool
	// Duration is -D: send_bw -b then skips the report exchange.
	Duration bool
	// PerPort is --report-per-port: reports carry four more fields.
	PerPort bool
}

// RunAllSizes returns the sizes perftest's -a runs: 2, 4, ... 2^23, or for
// send tests over UD up to the path MTU (mtuBytes).
func RunAllSizes(t Test, ud bool, mtuBytes int) []uint64 {
	maxPow := 24
	if ud && t.Verb() == VerbSend && mtuBytes > 0 {
		maxPow = 1
		for 1<<maxPow <= mtuBytes {
			maxPow++
		}
	}
	var s []uint64
	for i := 1; i < maxPow; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// Hooks are the calls Conn.Run makes into the tool between exchanges.
type Hooks struct {
	// Connect moves the local QPs to RTR and RTS using the peer's keys
	// (perftest's ctx_connect). Required.
	Connect func(remote []KeyMsg) error
	// Ready is called once the key phase is over, where perftest has
	// printed the address lines (optional).
	Ready func(remote []KeyMsg) error
	// Prepare posts work requests for a size before the pre-run barrier
	// (send tests post their receives there); optional.
	Prepare func(size uint64) error
	// Run runs the test for one size on the sides that run (see the flow
	// table above) and returns this side's result; latency tests return a
	// zero BWReport and print their own table row.
	Run func(size uint64) (BWReport, error)
	// Report is called after each size of a BW test with the row to
	// print: local is this side's result (nil on a server that did not
	// run), remote the peer's if it was exchanged. A duplex row is the
	// sum local.Add(*remote). Optional.
	Report func(size uint64, local, remote *BWReport) error
}

// Prologue is what the first exchanges settle.
type Prologue struct {
	PeerVersion string
	Sys         SysData   // the larger of both sides' values
	MTU         verbs.MTU // the path MTU both use
}

// Prologue runs the first three exchanges: versions, system data and MTU.
func (c *Conn) Prologue(ctx context.Context, sys SysData, mtu verbs.MTU) (Prologue, error) {
	var p Prologue
	var err error
	if p.PeerVersion, err = c.ExchangeVersions(ctx); err != nil {
		return p, err
	}
	remote, err := c.ExchangeSysData(ctx, sys)
	if err != nil {
		return p, err
	}
	p.Sys = sys.Max(remote)
	rmtu, err := c.ExchangeMTU(ctx, mtu)
	if err != nil {
		return p, err
	}
	p.MTU = negotiateMTU(mtu, rmtu)
	return p, nil
}

// Result is what Conn.Run learned from the peer.
type Result struct {
	Remote []KeyMsg // the peer's keys, one per QP
	// PeerReport is the client's result that a unidirectional write, read
	// or atomic BW server receives (and prints); nil otherwise.
	PeerReport *BWReport
}

// Run performs everything after the prologue for flow f: the key phase
// with local (one KeyMsg per QP), the tool's barriers and report
// exchanges around h.Run, and the final exchange. It closes the
// connection.
func (c *Conn) Run(ctx context.Context, f Flow, local []KeyMsg, h Hooks) (res Result, err error) {
	if len(local) == 0 {
		return res, errors.New("oob: no QP keys to exchange")
	}
	if h.Connect == nil || h.Run == nil {
		return res, errors.New("oob: Hooks.Connect and Hooks.Run are required")
	}
	if len(f.Sizes) == 0 {
		return res, errors.New("oob: Flow has no message size")
	}
	if !f.Test.IsBW() && len(local) != 1 {
		return res, fmt.Errorf("oob: %s uses one QP, not %d", f.Test, len(local))
	}
	if f.Duplex && !f.Test.IsBW() {
		return res, fmt.Errorf("oob: %s has no bidirectional mode", f.Test)
	}
	defer func() {
		if err != nil {
			c.nc.Close()
		}
	}()
	if res.Remote, err = c.keyPhase(ctx, f, local, h); err != nil {
		return res, err
	}
	q0 := local[0]
	sync := func() error { _, err := c.ExchangeKeys(ctx, q0); return err }
	syncAfterRun := func() error { _, err := c.SyncAfterRun(ctx, q0); return err }
	report := func(size uint64, l, r *BWReport) error {
		if h.Report != nil {
			return h.Report(size, l, r)
		}
		return nil
	}
	prepare := func(size uint64) error {
		if h.Prepare != nil {
			return h.Prepare(size)
		}
		return nil
	}

	switch f.Test {
	case WriteBW, ReadBW, AtomicBW:
		return res, c.rdmaBW(ctx, f, q0, h, &res, sync, syncAfterRun, report, prepare)

	case SendBW:
		for i, size := range f.Sizes {
			if err := prepare(size); err != nil {
				return res, err
			}
			barrier := sync
			if i > 0 {
				barrier = syncAfterRun
			}
			if err := barrier(); err != nil {
				return res, err
			}
			rep, err := h.Run(size)
			if err != nil {
				return res, err
			}
			var remote *BWReport
			if f.Duplex && !f.Duration {
				r, err := c.exchangeReportsAfterRun(ctx, rep, f.PerPort)
				if err != nil {
					return res, err
				}
				remote = &r
			}
			if err := report(size, &rep, remote); err != nil {
				return res, err
			}
			if f.RunAll {
				if err := syncAfterRun(); err != nil {
					return res, err
				}
			}
		}
		return res, c.Finish(ctx, q0)

	case SendLat:
		for i, size := range f.Sizes {
			if err := prepare(size); err != nil {
				return res, err
			}
			barrier := sync
			if i > 0 {
				barrier = syncAfterRun
			}
			if err := barrier(); err != nil {
				return res, err
			}
			if _, err := h.Run(size); err != nil {
				return res, err
			}
		}
		return res, c.Finish(ctx, q0)

	case WriteLat:
		for _, size := range f.Sizes {
			if err := prepare(size); err != nil {
				return res, err
			}
			if _, err := h.Run(size); err != nil {
				return res, err
			}
		}
		return res, c.Close()

	case ReadLat, AtomicLat:
		if c.role == Client {
			for _, size := range f.Sizes {
				if err := prepare(size); err != nil {
					return res, err
				}
				if _, err := h.Run(size); err != nil {
					return res, err
				}
			}
		}
		return res, c.Finish(ctx, q0)
	}
	return res, fmt.Errorf("oob: unknown test %d", f.Test)
}

// keyPhase passes the QPs' keys twice around Connect, with the barrier
// where the tool has it.
func (c *Conn) keyPhase(ctx context.Context, f Flow, local []KeyMsg, h Hooks) ([]KeyMsg, error) {
	remote := make([]KeyMsg, len(local))
	loop := func() error {
		for i, k := range local {
			r, err := c.ExchangeKeys(ctx, k)
			if err != nil {
				return err
			}
			remote[i] = r
		}
		return nil
	}
	barrier := func() error { _, err := c.ExchangeKeys(ctx, local[0]); return err }

	switch f.Test {
	case WriteLat, ReadLat, AtomicLat:
		if err := barrier(); err != nil {
			return nil, err
		}
	}
	if err := loop(); err != nil {
		return nil, err
	}
	if !c.NoGID {
		if err := CheckGIDCompatibility(local[0].GID, remote[0].GID); err != nil {
			return nil, err
		}
	}
	if err := h.Connect(append([]KeyMsg(nil), remote...)); err != nil {
		return nil, err
	}
	if f.Test.Verb() == VerbSend {
		if err := barrier(); err != nil {
			return nil, err
		}
		if err := loop(); err != nil {
			return nil, err
		}
	} else {
		if err := loop(); err != nil {
			return nil, err
		}
		if err := barrier(); err != nil {
			return nil, err
		}
	}
	if h.Ready != nil {
		if err := h.Ready(append([]KeyMsg(nil), remote...)); err != nil {
			return nil, err
		}
	}
	return remote, nil
}

// rdmaBW is the part of write_bw, read_bw and atomic_bw after the key
// phase.
func (c *Conn) rdmaBW(ctx context.Context, f Flow, q0 KeyMsg, h Hooks, res *Result,
	sync, syncAfterRun func() error, report func(uint64, *BWReport, *BWReport) error, prepare func(uint64) error) error {
	if !f.Duplex {
		if c.role == Server {
			// The server waits for the client's run, then prints the
			// client's report; its own is meaningless (zeros here).
			if err := syncAfterRun(); err != nil {
				return err
			}
			peer, err := c.ExchangeReports(ctx, BWReport{}, f.PerPort)
			if err != nil {
				return err
			}
			res.PeerReport = &peer
			if err := report(peer.Size, nil, &peer); err != nil {
				return err
			}
			return c.Finish(ctx, q0)
		}
		var last BWReport
		for _, size := range f.Sizes {
			if err := prepare(size); err != nil {
				return err
			}
			rep, err := h.Run(size)
			if err != nil {
				return err
			}
			last = rep
			if err := report(size, &rep, nil); err != nil {
				return err
			}
		}
		if err := sync(); err != nil {
			return err
		}
		if _, err := c.ExchangeReports(ctx, last, f.PerPort); err != nil {
			return err
		}
		return c.Finish(ctx, q0)
	}
	// Bidirectional: both run. With -a (write and read only) each size
	// has a barrier before and after the run.
	perSize := f.RunAll && f.Test != AtomicBW
	sizes := f.Sizes
	if !perSize {
		sizes = sizes[:1]
	}
	for i, size := range sizes {
		if err := prepare(size); err != nil {
			return err
		}
		barrier := sync
		if i > 0 {
			barrier = syncAfterRun
		}
		if err := barrier(); err != nil {
			return err
		}
		rep, err := h.Run(size)
		if err != nil {
			return err
		}
		if perSize {
			if err := syncAfterRun(); err != nil {
				return err
			}
		}
		remote, err := c.exchangeReportsAfterRun(ctx, rep, f.PerPort)
		if err != nil {
			return err
		}
		if err := report(size, &rep, &remote); err != nil {
			return err
		}
	}
	return c.Finish(ctx, q0)
}

// exchangeReportsAfterRun is ExchangeReports where the peer may still be
// running: the first field waits up to Timeouts.PeerRun.
func (c *Conn) exchangeReportsAfterRun(ctx context.Context, local BWReport, perPort bool) (BWReport, error) {
	items := local.reportItems(perPort)
	in := make([][]byte, len(items))
	for i, out := range items {
		in[i] = make([]byte, ReportItemSize)
		limit := c.Timeouts.step()
		if i == 0 {
			limit = c.Timeouts.peerRun()
		}
		if err := c.swap(ctx, "result report", limit, out, in[i]); err != nil {
			return BWReport{}, err
		}
	}
	r := reportFromItems(in)
	return r, c.fail(r.CheckPeer())
}

// CheckGIDCompatibility is perftest's ctx_check_gid_compatibility, which
// both sides apply to QP 0's GIDs right after the first key exchange: an
// IPv4-mapped GID cannot talk to an IPv6 one. A real peer that finds the
// mismatch exits, so this side reports it itself.
func CheckGIDCompatibility(local, remote bth.GID) error {
	if GIDIsIPv4Mapped(local) == GIDIsIPv4Mapped(remote) {
		return nil
	}
	return fmt.Errorf("the peer's GID %s and this side's GID %s are of different IP versions, which perftest refuses: choose GID indexes of the same kind on both sides", FormatGID(remote), FormatGID(local))
}
