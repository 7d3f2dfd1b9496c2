package cm

import (
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
)

// DupKey identifies a received MAD across the sender's resends: the
// sender's port (GID) and QP, the transaction ID and the attribute.
type DupKey struct {
	Src   bth.GID
	SrcQP bth.QPN
	TID   uint64
	Attr  AttrID
}

// Dedup remembers the MADs received recently and the answer sent to each,
// so that a resent request is answered again rather than handled twice. It
// is bounded: at most its capacity of keys, each forgotten after its time
// to live; when full, the oldest key goes first. It is pure: the caller
// passes the time, which must not go backwards.
type Dedup struct {
	ttl  time.Duration
	m    map[DupKey]dupEntry
	ring []dupSlot // keys in the order they were recorded
	head int       // oldest slot
	n    int       // slots in use
}

type dupEntry struct {
	at     monotime.Time
	answer []byte
}

type dupSlot struct {
	key DupKey
	at  monotime.Time
}

// NewDedup returns a Dedup holding at most capacity keys (at least 1) for
// ttl each.
func NewDedup(capacity int, ttl time.Duration) *Dedup {
	capacity = max(capacity, 1)
	return &Dedup{ttl: ttl, m: make(map[DupKey]dupEntry, capacity), ring: make([]dupSlot, capacity)}
}

// Len returns how many keys are remembered.
func (d *Dedup) Len() int { return len(d.m) }

// Check reports whether key was received within the time to live, with the
// answer recorded for it (nil while none was). A key not seen (or seen too
// long ago) is recorded as received at now and reported as new.
func (d *Dedup) Check(now monotime.Time, key DupKey) (answer []byte, dup bool) {
	d.expire(now)
	if e, ok := d.m[key]; ok {
		return e.answer, true
	}
	if d.n == len(d.ring) {
		d.pop()
	}
	d.ring[(d.head+d.n)%len(d.ring)] = dupSlot{key, now}
	d.n++
	d.m[key] = dupEntry{at: now}
	return nil, false
}

// Answer records the answer sent for key, which Check returns for its
// duplicates. It does nothing for a key not remembered.
func (d *Dedup) Answer(key DupKey, answer []byte) {
	if e, ok := d.m[key]; ok {
		e.answer = answer
		d.m[key] = e
	}
}

// expire forgets the keys older than the time to live.
func (d *Dedup) expire(now monotime.Time) {
	for d.n > 0 && now.Sub(d.ring[d.head].at) > d.ttl {
		d.pop()
	}
}

// pop forgets the oldest key.
func (d *Dedup) pop() {
	s := d.ring[d.head]
	if e, ok := d.m[s.key]; ok && e.at == s.at {
		delete(d.m, s.key)
	}
	d.ring[d.head] = dupSlot{}
	d.head = (d.head + 1) % len(d.ring)
	d.n--
}
