package mr

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentRegLookup registers, re-registers and deregisters MRs from
// one goroutine while others look keys up and move data through them. Every
// data-path call must either succeed or fail with ErrBadKey (key went stale);
// run with -race.
func TestConcurrentRegLookup(t *testing.T) {
	tab := NewTable(Options{})
	pd := tab.AllocPD()
	const nkeys = 64
	var keys [nkeys]atomic.Uint32
	iters := 20000
	if testing.Short() {
		iters = 2000
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var ok, stale atomic.Int64
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 0))
			p := make([]byte, 16)
			for !stop.Load() {
				k := keys[r.IntN(nkeys)].Load()
				if k == 0 {
					continue
				}
				// Goroutine g owns the 32 bytes at 0x1000+32g of
				// every MR: 16 bytes of data and a word for atomics.
				stripe := uint64(0x1000 + 32*g)
				var err error
				switch r.IntN(5) {
				case 0:
					err = pd.CheckRemote(k, 0x1000, 128, AccessRemoteWrite)
				case 1:
					err = pd.WriteRemote(k, stripe, p)
				case 2:
					err = pd.ReadRemote(k, stripe, p)
				case 3:
					_, err = pd.FetchAdd(k, stripe+16, 1)
				case 4:
					_, err = pd.Scatter([]SGE{{Addr: stripe, Length: 16, LKey: k}}, 0, p)
				}
				switch err {
				case nil:
					ok.Add(1)
				case ErrBadKey:
					stale.Add(1)
				default:
					t.Errorf("data path error %v", err)
					return
				}
			}
		}()
	}

	var mrs [nkeys]*MR
	r := rand.New(rand.NewPCG(9, 9))
	for range iters {
		i := r.IntN(nkeys)
		var err error
		switch {
		case mrs[i] == nil:
			mrs[i], err = pd.RegMRIOVA(Slice(alignedBuf(128)), 0x1000, accessAll)
		case r.IntN(2) == 0:
			mrs[i], err = mrs[i].Rereg(ReregChangeTranslation, nil, Slice(alignedBuf(128)), 0x1000, 0)
		default:
			err = mrs[i].Dereg()
			mrs[i] = nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if mrs[i] != nil {
			keys[i].Store(mrs[i].RKey())
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d accesses succeeded, %d hit stale keys", ok.Load(), stale.Load())
	if ok.Load() == 0 {
		t.Error("no access succeeded")
	}
}

// TestDeregWaitsForAccess checks that once Dereg returns no write through the
// old key or a held *MR lands in the memory: the test then owns the memory
// and writes it without synchronization, which the race detector would
// flag if an engine goroutine still wrote into it.
func TestDeregWaitsForAccess(t *testing.T) {
	for _, held := range []bool{false, true} {
		tab := NewTable(Options{})
		pd := tab.AllocPD()
		buf := alignedBuf(4096)
		m := mustReg(t, pd, buf, 0x1000, accessAll)
		ones := bytes.Repeat([]byte{0xff}, 1024)
		var started sync.WaitGroup
		var wg sync.WaitGroup
		for g := range 2 {
			started.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true
				for i := 0; ; i++ {
					// Each goroutine writes its own kilobyte and
					// increments its own word after the first two
					// kilobytes.
					var err error
					va := uint64(0x1000 + g*1024)
					word := uint64(0x1000 + 2048 + g*8)
					switch {
					case held && i%2 == 0:
						err = m.Write(va, ones)
					case held:
						_, err = m.FetchAdd(word, 1)
					case i%2 == 0:
						err = pd.WriteRemote(m.RKey(), va, ones)
					default:
						_, err = pd.FetchAdd(m.RKey(), word, 1)
					}
					if first {
						started.Done()
						first = false
					}
					if err != nil {
						if want := map[bool]error{false: ErrBadKey, true: ErrDeregistered}[held]; err != want {
							t.Errorf("after Dereg: %v, want %v", err, want)
						}
						return
					}
				}
			}()
		}
		started.Wait()
		time.Sleep(time.Millisecond)
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
		// The memory is ours again.
		clear(buf)
		binary.NativeEndian.PutUint64(buf, 1)
		wg.Wait()
		if !bytes.Equal(buf[8:], make([]byte, len(buf)-8)) || buf[0] != 1 {
			t.Fatalf("held=%v: memory modified after Dereg returned", held)
		}
	}
}

// TestAtomicsHammer runs FetchAdd and CompareSwap from several goroutines on
// the same words.
func TestAtomicsHammer(t *testing.T) {
	tab := NewTable(Options{})
	pd := tab.AllocPD()
	buf := alignedBuf(16)
	m := mustReg(t, pd, buf, 0x1000, accessAll)
	const goroutines = 8
	n := 20000
	if testing.Short() {
		n = 2000
	}
	olds := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				// Word 0: FetchAdd by 1, recording the values returned.
				old, err := pd.FetchAdd(m.RKey(), 0x1000, 1)
				if err != nil {
					t.Error(err)
					return
				}
				olds[g] = append(olds[g], old)
				// Word 1: increment with a CompareSwap loop.
				var cur uint64
				for {
					v, err := m.CompareSwap(0x1008, cur, cur+1)
					if err != nil {
						t.Error(err)
						return
					}
					if v == cur {
						break
					}
					cur = v
				}
			}
		}()
	}
	wg.Wait()
	total := uint64(goroutines * n)
	if v := binary.NativeEndian.Uint64(buf); v != total {
		t.Errorf("FetchAdd sum = %d, want %d", v, total)
	}
	if v := binary.NativeEndian.Uint64(buf[8:]); v != total {
		t.Errorf("CompareSwap sum = %d, want %d", v, total)
	}
	// Every original value from 0 to total-1 was returned exactly once.
	seen := make([]bool, total)
	for _, os := range olds {
		for _, o := range os {
			if o >= total || seen[o] {
				t.Fatalf("FetchAdd returned %d twice or out of range", o)
			}
			seen[o] = true
		}
	}
}
