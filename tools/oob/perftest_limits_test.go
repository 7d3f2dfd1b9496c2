package oob

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// TestPeerLimits plays a hostile client against this package's server:
// sizes and counts beyond what perftest's own command line takes end the
// exchange with ErrLimit, naming the field and the limit, before the
// caller gets the value to allocate with.
func TestPeerLimits(t *testing.T) {
	ctx := context.Background()
	version := []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	be64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	prologue := func(cycle, cache uint32) []step {
		return []step{{send: version}, {n: 16}, {send: be32(cycle)}, {n: 4}, {send: be32(cache)}, {n: 4}}
	}
	keys := testKeys(1, 0x30)
	peerKeys, _ := testKeys(1, 0x50)[0].Marshal(true)
	runServer := func(t *testing.T, f Flow, steps []step) (*side, error) {
		ln, addr := loopback(t)
		errc := fakeClient(addr, steps)
		c, err := AcceptPerftest(ctx, ln, shortTimeouts)
		if err != nil {
			t.Fatal(err)
		}
		s := &side{conn: c, flow: f, local: keys}
		err = s.run(ctx)
		<-errc
		return s, err
	}
	writeBW := Flow{Test: WriteBW, Sizes: []uint64{65536}}

	for _, tc := range []struct {
		name         string
		cycle, cache uint32
		want         string
	}{
		{"cycle buffer 2 GiB", math.MaxInt32, 64, "cycle buffer size beyond this side's limit: a page size of 2147483647 bytes, above the limit of 1048576 bytes"},
		{"cycle buffer 256 MiB", 256 << 20, 64, "a page size of 268435456 bytes, above the limit of 1048576 bytes"},
		{"cache line 1 MiB", 4096, 1 << 20, "cache line size beyond this side's limit: a cache line of 1048576 bytes, above the limit of 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := runServer(t, writeBW, append(prologue(tc.cycle, tc.cache), step{eof: true}))
			wantKind(t, err, ErrLimit)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q, want it to contain %q", err, tc.want)
			}
			if s.prologue.Sys != (SysData{}) {
				t.Errorf("the prologue handed out %+v", s.prologue.Sys)
			}
		})
	}

	// The largest legal values go through.
	t.Run("largest legal values", func(t *testing.T) {
		steps := append(prologue(MaxPeerCycleBuffer, MaxPeerCacheLine), step{send: []byte("3\x00")}, step{n: 2}, step{close: true})
		s, err := runServer(t, writeBW, steps)
		if s.prologue.Sys != (SysData{MaxPeerCycleBuffer, MaxPeerCacheLine}) {
			t.Errorf("prologue %+v, err %v", s.prologue, err)
		}
	})

	// A unidirectional write_bw client reports its result to the server,
	// which prints it and uses its size and count to check its memory.
	report := func(size, iters uint64) []step {
		steps := append(prologue(4096, 64), step{send: []byte("3\x00")}, step{n: 2})
		for range 4 { // keys, keys, barrier, barrier after the run
			steps = append(steps, step{send: peerKeys}, step{n: KeyMsgSizeGID})
		}
		steps = append(steps, step{send: be64(size)}, step{n: 8}, step{send: be64(iters)}, step{n: 8})
		for range 3 {
			steps = append(steps, step{send: be64(0)}, step{n: 8})
		}
		return append(steps, step{eof: true})
	}
	for _, tc := range []struct {
		name        string
		size, iters uint64
		want        string
	}{
		{"report size", math.MaxUint64, 5000, "result report beyond this side's limit: a message size of 18446744073709551615 bytes, above the limit of 2147483647 bytes"},
		{"report iterations", 65536, math.MaxUint64, "an iteration count of 18446744073709551615, above the limit of 1638400000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := runServer(t, writeBW, report(tc.size, tc.iters))
			wantKind(t, err, ErrLimit)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q, want it to contain %q", err, tc.want)
			}
			if len(s.rows) != 0 || s.result.PeerReport != nil {
				t.Errorf("the report was used: rows %q", s.rows)
			}
		})
	}
}
