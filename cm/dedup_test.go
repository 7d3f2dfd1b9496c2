package cm

import (
	"bytes"
	"testing"
	"time"

	"github.com/sroce/sroce/monotime"
)

func TestDedup(t *testing.T) {
	d := NewDedup(3, time.Second)
	key := func(tid uint64) DupKey { return DupKey{Src: gid(1), SrcQP: 1, TID: tid, Attr: AttrREQ} }
	now := monotime.Time(0)
	if _, dup := d.Check(now, key(1)); dup {
		t.Fatal("first REQ reported as a duplicate")
	}
	if ans, dup := d.Check(now, key(1)); !dup || ans != nil {
		t.Fatalf("resent REQ before the answer: %v %v", ans, dup)
	}
	rep := []byte("REP")
	d.Answer(key(1), rep)
	if ans, dup := d.Check(now.Add(time.Second), key(1)); !dup || !bytes.Equal(ans, rep) {
		t.Fatalf("resent REQ after the answer: %q %v", ans, dup)
	}
	// Another sender, QP or attribute is another key.
	other := key(1)
	other.Attr = AttrDREQ
	if _, dup := d.Check(now.Add(time.Second), other); dup {
		t.Error("DREQ with the REQ's TID reported as a duplicate")
	}
	// After its time to live the key is new again.
	if _, dup := d.Check(now.Add(time.Second+1), key(1)); dup {
		t.Error("REQ past its time to live reported as a duplicate")
	}
	// The capacity bounds the memory: the oldest key goes first.
	d = NewDedup(3, time.Hour)
	for tid := uint64(1); tid <= 4; tid++ {
		d.Check(monotime.Time(tid), key(tid))
	}
	if d.Len() != 3 {
		t.Errorf("%d keys remembered, capacity 3", d.Len())
	}
	if _, dup := d.Check(5, key(4)); !dup {
		t.Error("newest key forgotten")
	}
	if _, dup := d.Check(5, key(1)); dup {
		t.Error("oldest key still remembered past the capacity")
	}
	d.Answer(key(99), rep) // not remembered: nothing happens
	if d.Len() != 3 {
		t.Errorf("Answer for an unknown key changed the table: %d", d.Len())
	}
	// A long run stays within its bounds.
	d = NewDedup(16, 10*time.Millisecond)
	for i := 0; i < 10000; i++ {
		d.Check(monotime.Time(i)*monotime.Time(time.Millisecond), key(uint64(i%40)))
		if d.Len() > 16 || d.n > 16 {
			t.Fatalf("step %d: %d keys, %d slots", i, d.Len(), d.n)
		}
	}
}
