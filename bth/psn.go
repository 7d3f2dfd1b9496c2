package bth

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24 and
// comparisons are valid for numbers less than 2^23 apart, as in the IBTA
// specification and rdma_rxe.
type PSN uint32

// PSNMask is the largest PSN; PSNs live in [0, PSNMask].
const PSNMask = 1<<24 - 1

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p-q in the 24-bit sequence space, in
// [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32(uint32(p-q)<<8) >> 8 }

// LessThan reports whether p comes before q.
func (p PSN) LessThan(q PSN) bool { return p.Diff(q) < 0 }

// LessThanEq reports whether p comes before q or equals it.
func (p PSN) LessThanEq(q PSN) bool { return p.Diff(q) <= 0 }

// InWindow reports whether p lies in [first, first+size).
func (p PSN) InWindow(first PSN, size uint32) bool {
	d := p.Diff(first)
	return d >= 0 && uint32(d) < size
}

// QPN is a 24-bit queue pair number.
type QPN uint32

// QPNMask is the largest QPN.
const QPNMask = 1<<24 - 1

// MulticastQPN is the destination QPN of a UD packet sent to a multicast
// group: every QP attached to the group takes it.
const MulticastQPN QPN = 0xffffff

// Valid reports whether q fits in 24 bits.
func (q QPN) Valid() bool { return q <= QPNMask }

// Next returns q+1 modulo 2^24.
func (q QPN) Next() QPN { return (q + 1) & QPNMask }

// Diff returns the signed distance q-r modulo 2^24.
func (q QPN) Diff(r QPN) int32 { return int32(uint32(q-r)<<8) >> 8 }

// LessThan reports whether q comes before r in the wrapping 24-bit space.
func (q QPN) LessThan(r QPN) bool { return q.Diff(r) < 0 }

// MSN is the 24-bit message sequence number carried in an AETH.
type MSN = PSN
