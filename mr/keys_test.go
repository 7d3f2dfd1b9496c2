package mr

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

func TestFeistelIsPermutation(t *testing.T) {
	var f feistel
	r := rand.New(rand.NewPCG(3, 4))
	for i := range f.k {
		f.k[i] = r.Uint64()
	}
	step := uint32(1)
	if testing.Short() {
		step = 97
	}
	for x := uint32(0); x < 1<<indexBits; x += step {
		y := f.forward(x)
		if y>>indexBits != 0 {
			t.Fatalf("forward(%#x) = %#x, not 24 bits", x, y)
		}
		if z := f.inverse(y); z != x {
			t.Fatalf("inverse(forward(%#x)) = %#x", x, z)
		}
	}
}

func TestKeysUnguessable(t *testing.T) {
	const n = 20000
	tab := NewTable(Options{})
	pd := tab.AllocPD()
	buf := make([]byte, 8)
	idx := make([]uint32, n)
	seen := make(map[uint32]bool, n)
	var ones [indexBits]int
	for i := range idx {
		m := mustReg(t, pd, buf, 0, 0)
		k := m.LKey()
		if k == 0 {
			t.Fatal("key 0 issued")
		}
		idx[i] = k >> 8
		if seen[idx[i]] {
			t.Fatalf("index %#x issued twice", idx[i])
		}
		seen[idx[i]] = true
		for b := range indexBits {
			ones[b] += int(idx[i] >> b & 1)
		}
	}
	// Consecutive registrations: differences look random. Count pairs whose
	// difference is small or equal to the previous difference.
	small, repeat := 0, 0
	for i := 2; i < n; i++ {
		d := (idx[i] - idx[i-1]) & indexMask
		if d < 1<<10 || d > indexMask-1<<10 {
			small++
		}
		if d == (idx[i-1]-idx[i-2])&indexMask {
			repeat++
		}
	}
	// For uniformly random indices, P(|d| < 1024) = 2^-13 and a repeat has
	// probability 2^-24: expect about 2 and 0.
	if small > 20 || repeat > 2 {
		t.Errorf("indices look sequential: %d small steps, %d repeated steps in %d", small, repeat, n)
	}
	// Each index bit is set about half the time (binomial, sd ~ 71).
	for b, c := range ones {
		if c < n/2-600 || c > n/2+600 {
			t.Errorf("index bit %d set in %d of %d keys", b, c, n)
		}
	}
	// The low bits of successive indices are not correlated with the slot
	// number: compare the bit-level Hamming distance of neighbours.
	dist := 0
	for i := 1; i < n; i++ {
		dist += bits.OnesCount32(idx[i] ^ idx[i-1])
	}
	if avg := float64(dist) / (n - 1); avg < 11 || avg > 13 {
		t.Errorf("average Hamming distance between consecutive indices %.2f, want about 12", avg)
	}
}

func TestKeysDependOnSeed(t *testing.T) {
	// The seed fixes the key indices (the permutation of slots), not the
	// key bytes, which come from crypto/rand.
	first := func(seed uint64) []uint32 {
		tab := NewTable(Options{Rand: rand.NewPCG(seed, seed)})
		pd := tab.AllocPD()
		var ks []uint32
		for range 16 {
			ks = append(ks, mustReg(t, pd, make([]byte, 8), 0, 0).LKey())
		}
		return ks
	}
	a, b, c := first(1), first(1), first(2)
	same, sameByte := 0, 0
	for i := range a {
		if a[i]>>8 != b[i]>>8 {
			t.Fatalf("same seed, different indices: %#08x vs %#08x", a[i], b[i])
		}
		if a[i]&0xff == b[i]&0xff {
			sameByte++
		}
		if a[i]>>8 == c[i]>>8 {
			same++
		}
	}
	if same > 1 {
		t.Errorf("different seeds produced %d equal indices out of %d", same, len(a))
	}
	// Equal key bytes have probability 1/256 each.
	if sameByte > 3 {
		t.Errorf("same seed produced %d equal key bytes out of %d: key bytes follow the seed", sameByte, len(a))
	}
}

// rekeys returns the keys of n successive registrations of one slot, made
// by re-registration, by deregistration and registration in a table of one
// slot, by fast registration with NewKey, and by type 1 window binds with
// NewKey: every way a slot gets its next key.
func rekeys(t *testing.T, how string, n int) []uint32 {
	t.Helper()
	buf := alignedBuf(64)
	keys := make([]uint32, 0, n+1)
	switch how {
	case "rereg":
		pd := newTestTable(t, 0).AllocPD()
		m := mustReg(t, pd, buf, 0x1000, AccessLocalWrite)
		keys = append(keys, m.LKey())
		for range n {
			next, err := m.Rereg(0, nil, nil, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			m = next
			keys = append(keys, m.LKey())
		}
	case "reuse":
		pd := newTestTable(t, 1).AllocPD()
		m := mustReg(t, pd, buf, 0x1000, 0)
		keys = append(keys, m.LKey())
		for range n {
			m.Dereg()
			m = mustReg(t, pd, buf, 0x1000, 0)
			keys = append(keys, m.LKey())
		}
	case "fastreg":
		pd := newTestTable(t, 0).AllocPD()
		f, err := pd.AllocMR(64)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Map(Slice(buf), 0x1000); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, f.LKey())
		for range n {
			k := f.NewKey()
			if err := pd.RegFast(k, AccessRemoteRead); err != nil {
				t.Fatal(err)
			}
			if err := pd.Invalidate(k, false); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, f.LKey())
		}
	case "bind":
		pd := newTestTable(t, 0).AllocPD()
		m := mustReg(t, pd, buf, 0x1000, AccessLocalWrite|AccessMWBind)
		w, err := pd.AllocMW(MWType1)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, w.RKey())
		for range n {
			b := MWBind{LKey: m.LKey(), Addr: 0x1000, Length: 8, Access: AccessRemoteRead}
			if err := pd.BindMW(w.NewKey(), &b); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, w.RKey())
		}
	}
	return keys
}

func TestKeyByteFresh(t *testing.T) {
	// Every way a slot gets a new key draws the key byte from crypto/rand:
	// never the previous byte, uniformly distributed, and unrelated to the
	// previous one. An increment (the old scheme, and ibv_inc_rkey) fails
	// every check.
	const n = 255 * 60
	for _, how := range []string{"rereg", "reuse", "fastreg", "bind"} {
		t.Run(how, func(t *testing.T) {
			keys := rekeys(t, how, n)
			var bytes [256]int
			var deltas [256]int
			for i := 1; i < len(keys); i++ {
				prev, k := keys[i-1], keys[i]
				if k>>8 != prev>>8 {
					t.Fatalf("key %#08x after %#08x: index changed", k, prev)
				}
				if k == prev {
					t.Fatalf("key %#08x issued twice in a row", k)
				}
				bytes[k&0xff]++
				deltas[uint8(k-prev)]++
			}
			// Chi-square against the uniform distribution: about 255
			// (or 254) with a standard deviation of about 22.5.
			chi := func(c []int, total int) float64 {
				e := float64(total) / float64(len(c))
				x := 0.0
				for _, v := range c {
					x += (float64(v) - e) * (float64(v) - e) / e
				}
				return x
			}
			if x := chi(bytes[:], n); x > 400 {
				t.Errorf("key bytes not uniform: chi-square %.0f over 256 values", x)
			}
			if x := chi(deltas[1:], n); x > 400 {
				t.Errorf("successor key bytes not uniform given the previous: chi-square %.0f over 255 steps", x)
			}
			// The best fixed step (successor = stale + d) is right about
			// once in 255.
			best := 0
			for d := 1; d < 256; d++ {
				best = max(best, deltas[d])
			}
			if best > 2*n/255 {
				t.Errorf("step %d guesses %d of %d successors", best, best, n)
			}
		})
	}
}

func TestStaleKeySuccessorGuesses(t *testing.T) {
	// A blind attacker holds a stale key and tries the candidates for its
	// successor in some order. It needs on average 128 guesses (the
	// successor is uniform over the 255 other key bytes), as the package
	// documentation says; with an incrementing key byte it needs one.
	const n = 4000
	keys := rekeys(t, "rereg", n)
	total := 0
	for i := 1; i < len(keys); i++ {
		stale, next := keys[i-1], keys[i]
		guesses := 0
		for d := uint32(1); d < 256; d++ {
			guesses++
			if stale&^0xff|(stale+d)&0xff == next {
				break
			}
		}
		total += guesses
	}
	// Uniform on 1..255: mean 128, standard deviation 73.6, so the mean
	// of 4000 has a standard deviation of about 1.2.
	if avg := float64(total) / n; avg < 120 || avg > 136 {
		t.Errorf("a blind attacker needs %.1f guesses on average, want about 128", avg)
	}
}

func TestStaleKeyAfterSlotReuse(t *testing.T) {
	// Churning registrations: a deregistered key stays invalid, because the
	// freed slot is reused late and with another key byte. (A later
	// occupation may draw the stale byte again, with probability 1/255.)
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	buf := make([]byte, 8)
	stale := mustReg(t, pd, buf, 0, 0)
	key := stale.LKey()
	stale.Dereg()
	reused := 0
	for range 4 * (reuseDelay + 1) {
		m := mustReg(t, pd, buf, 0, 0)
		if m.LKey()>>8 == key>>8 {
			reused++
			if reused == 1 && m.LKey() == key {
				t.Fatalf("stale key %#08x issued again at the next occupation of its slot", key)
			}
		}
		if _, err := pd.LookupLKey(key, 0); err != ErrBadKey && m.LKey() != key {
			t.Fatalf("stale key: %v", err)
		}
		m.Dereg()
	}
	if reused == 0 || reused > 4 {
		t.Errorf("slot of the stale key reused %d times in %d registrations", reused, 4*(reuseDelay+1))
	}

	// With a tiny table the slot is reused at once, but never with the key
	// byte it just had.
	tab = newTestTable(t, 1)
	pd = tab.AllocPD()
	m := mustReg(t, pd, buf, 0, 0)
	for range 1000 {
		prev := m.LKey()
		m.Dereg()
		m = mustReg(t, pd, buf, 0, 0)
		if m.LKey() == prev {
			t.Fatalf("key %#08x reissued at once", prev)
		}
		if _, err := pd.LookupLKey(prev, 0); err != ErrBadKey {
			t.Fatalf("stale key %#08x: %v", prev, err)
		}
	}
}
