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
	first := func(seed uint64) []uint32 {
		tab := NewTable(Options{Rand: rand.NewPCG(seed, seed)})
		pd := tab.AllocPD()
		var ks []uint32
		for range 8 {
			ks = append(ks, mustReg(t, pd, make([]byte, 8), 0, 0).LKey())
		}
		return ks
	}
	a, b, c := first(1), first(1), first(2)
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different keys: %#08x vs %#08x", a[i], b[i])
		}
		if a[i]>>8 == c[i]>>8 {
			same++
		}
	}
	if same > 1 {
		t.Errorf("different seeds produced %d equal indices out of %d", same, len(a))
	}
}

func TestKeyByteAdvancesOnRereg(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	m := mustReg(t, pd, make([]byte, 8), 0, AccessLocalWrite)
	keys := map[uint32]bool{m.LKey(): true}
	for i := range 255 {
		n, err := m.Rereg(0, nil, nil, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := m.LKey()&^0xff | (m.LKey()+1)&0xff
		if want == 0 {
			want = 1
		}
		if n.LKey() != want {
			t.Fatalf("rereg %d: key %#08x after %#08x, want %#08x", i, n.LKey(), m.LKey(), want)
		}
		if keys[n.LKey()] {
			t.Fatalf("rereg %d: key %#08x repeated within 256 re-registrations", i, n.LKey())
		}
		keys[n.LKey()] = true
		for k := range keys {
			if k != n.LKey() {
				if _, err := pd.LookupLKey(k, 0); err != ErrBadKey {
					t.Fatalf("stale key %#08x: %v", k, err)
				}
			}
		}
		m = n
	}
}

func TestStaleKeyAfterSlotReuse(t *testing.T) {
	// Churning registrations: a deregistered key stays invalid, because the
	// freed slot is reused late and with the next key byte.
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	buf := make([]byte, 8)
	stale := mustReg(t, pd, buf, 0, 0)
	key := stale.LKey()
	stale.Dereg()
	reused := 0
	for range 4 * (reuseDelay + 1) {
		m := mustReg(t, pd, buf, 0, 0)
		if m.LKey() == key {
			t.Fatalf("stale key %#08x issued again", key)
		}
		if m.LKey()>>8 == key>>8 {
			reused++
		}
		if _, err := pd.LookupLKey(key, 0); err != ErrBadKey {
			t.Fatalf("stale key: %v", err)
		}
		m.Dereg()
	}
	if reused == 0 || reused > 4 {
		t.Errorf("slot of the stale key reused %d times in %d registrations", reused, 4*(reuseDelay+1))
	}

	// With a tiny table the slot is reused at once, but the key byte still
	// differs for 255 re-occupations.
	tab = newTestTable(t, 1)
	pd = tab.AllocPD()
	m := mustReg(t, pd, buf, 0, 0)
	seen := map[uint32]bool{m.LKey(): true}
	for range 255 {
		m.Dereg()
		m = mustReg(t, pd, buf, 0, 0)
		if seen[m.LKey()] {
			t.Fatalf("key %#08x reissued within 256 registrations of one slot", m.LKey())
		}
		seen[m.LKey()] = true
	}
}
