package qp

import (
	"math/rand"
	"testing"
	"unsafe"

	"github.com/sroce/sroce/mr"
)

// TestSendArena posts requests of random sizes into a send queue and
// releases them in random batches, as the loop does, checking after every
// step that each queued request still reads back what was written, that
// no arena exceeds the bound and that the generations alive stay few.
func TestSendArena(t *testing.T) {
	for _, c := range []struct{ limit, maxSGE, maxInline uint32 }{
		{1, 1, 0}, {4, 2, 64}, {64, 4, 400}, {500, 32, 400}, {3, 0, 16},
	} {
		var s sendQueue
		s.initSend(c.limit, c.maxSGE, c.maxInline, false)
		rng := rand.New(rand.NewSource(int64(c.limit)))
		want := map[uint32][]byte{} // by slot index: what it holds
		var fill byte
		check := func() {
			for i := s.cons.Load(); i != s.prod.Load(); i++ {
				w := s.at(i)
				var got []byte
				if w.inline {
					got = s.inlineOf(w)
				} else if w.nsge > 0 {
					sgl := s.sglOf(w)
					got = unsafe.Slice((*byte)(unsafe.Pointer(&sgl[0])), len(sgl)*int(unsafe.Sizeof(mr.SGE{})))
				}
				if string(got) != string(want[i&s.mask]) {
					t.Fatalf("limit %d: slot %d reads %x, was written %x", c.limit, i, got, want[i&s.mask])
				}
			}
			if g := s.gen - s.oldest; g >= arenaGens {
				t.Fatalf("limit %d: %d generations alive", c.limit, g+1)
			}
			for i := range s.arenas {
				if a := s.arenas[i].Load(); a != nil && uint64(len(*a)) > s.maxArena {
					t.Fatalf("limit %d: an arena of %d bytes, the bound is %d", c.limit, len(*a), s.maxArena)
				}
			}
		}
		for range 20000 {
			if !s.full() && rng.Intn(3) != 0 {
				p := s.prod.Load()
				w := s.at(p)
				w.inline, w.nsge, w.length = false, 0, 0
				var b []byte
				if c.maxInline > 0 && (c.maxSGE == 0 || rng.Intn(2) == 0) {
					w.inline = true
					w.length = uint32(rng.Intn(int(c.maxInline) + 1))
					b = s.place(w, w.length)[:w.length]
				} else if c.maxSGE > 0 {
					w.nsge = uint8(rng.Intn(int(c.maxSGE)) + 1)
					b = s.place(w, uint32(w.nsge)*uint32(unsafe.Sizeof(mr.SGE{})))
				}
				for j := range b {
					fill++
					b[j] = fill
				}
				want[p&s.mask] = append([]byte(nil), b...)
				s.prod.Store(p + 1)
			} else if n := s.count(); n > 0 {
				s.cons.Add(uint32(rng.Intn(int(n)) + 1))
			}
			check()
		}
		if got := s.arenaBytes(); got > 2*int(s.maxArena) {
			t.Errorf("limit %d: arenas hold %d bytes, more than twice the bound %d", c.limit, got, s.maxArena)
		}
	}
}

// TestSendArenaFootprint: a QP with the largest queues the daemon admits
// (16,384 WRs of 32 SGEs and 400 bytes of inline) holds no arena until it
// posts, and one small arena for a stream of one-SGE requests.
func TestSendArenaFootprint(t *testing.T) {
	var s sendQueue
	s.initSend(2*16384, 32, 400, false)
	if got := s.arenaBytes(); got != 0 {
		t.Fatalf("an unused queue holds %d arena bytes", got)
	}
	for range 100000 {
		p := s.prod.Load()
		w := s.at(p)
		w.inline, w.nsge = false, 1
		s.place(w, uint32(unsafe.Sizeof(mr.SGE{})))
		s.prod.Store(p + 1)
		if s.count() > 16 {
			s.cons.Add(8)
		}
	}
	if got := s.arenaBytes(); got > arenaMinBytes {
		t.Errorf("a stream of one-SGE requests, 16 queued at most, grew the arena to %d bytes", got)
	}
	t.Logf("largest arena %d bytes; before, the queue held %d bytes of SGL and inline storage", s.maxArena, 2*16384*(32*16+400))
}
