package oob

// The arithmetic of perftest 4.5's result rows (print_report_bw,
// print_report_lat, print_report_lat_duration), so that a sroce tool given
// the same timings prints the same numbers, quirks included (integer
// division of cycle counts, a standard deviation summed over truncated
// integers). perftest counts CPU cycles; sroce passes nanoseconds, that is
// cycles of a 1 GHz clock (TicksPerUsec 1000).

import (
	"math"
	"slices"
)

// BWInput are the timings of one BW run.
type BWInput struct {
	Size  uint64 // message size
	Iters uint64 // iterations per QP (in duration mode: all counted iterations)
	QPs   int    // QPs the iterations were spread over (iteration mode)
	// Posted and Completed are the tick counts at which each message was
	// posted and its completion seen (perftest's tposted/tcompleted),
	// Iters*QPs entries. Without peak (NoPeak) only entry 0 of each is
	// used: the start and the end of the run.
	Posted, Completed []uint64
	NoPeak            bool
	CQMod, PostList   int
	Duration          bool    // -D: Iters already counts all QPs
	TicksPerSec       float64 // 1e9 for nanoseconds
	Gbits             bool    // --report_gbits
}

// NewBWReport computes the row perftest prints for in.
func NewBWReport(in BWInput) BWReport {
	n := in.Iters
	if !in.Duration {
		n *= uint64(max(in.QPs, 1))
	}
	cqMod := uint64(max(in.CQMod, 1))
	postList := uint64(max(in.PostList, 1))
	optDelta := in.Completed[0] - in.Posted[0]
	if !in.NoPeak {
		for i := uint64(0); i < n; i += postList {
			for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
				t := (in.Completed[j] - in.Posted[i]) / (j - i + 1)
				optDelta = min(optDelta, t)
			}
			if n%cqMod != 0 {
				j := n - 1
				t := (in.Completed[j] - in.Posted[i]) / (j - i + 1)
				optDelta = min(optDelta, t)
			}
		}
	}
	format := float64(0x100000)
	if in.Gbits {
		format = 125000000
	}
	loc := uint64(0)
	if !in.NoPeak {
		loc = n - 1
	}
	sum := float64(in.Completed[loc] - in.Posted[0])
	size := float64(in.Size)
	r := BWReport{
		Size:    in.Size,
		Iters:   n,
		BWAvg:   size * float64(n) * in.TicksPerSec / (sum * format),
		MsgRate: float64(n) * in.TicksPerSec / (sum * 1000000),
	}
	var peakUp uint64
	if !in.NoPeak {
		peakUp = in.Size * uint64(in.TicksPerSec)
	}
	peakDown := optDelta * uint64(format)
	r.BWPeak = float64(peakUp) / float64(peakDown)
	return r
}

// roundUp rounds v up to a multiple of m.
func roundUp(v, m uint64) uint64 { return (v + m - 1) / m * m }

// LatInput are the timings of one latency run in iteration mode.
type LatInput struct {
	Size  uint64
	Iters uint64
	// Stamps are the tick counts at which each iteration was posted
	// (perftest's tposted), Iters entries; the samples are their
	// differences.
	Stamps []uint64
	// RTTFactor is 2 for send and write (half of a ping-pong round trip),
	// 1 for read and atomic; see RTTFactor.
	RTTFactor    int
	TicksPerUsec float64 // 1000 for nanoseconds; 1 with -C (cycles)
}

// RTTFactor returns the divisor perftest applies to t's samples.
func RTTFactor(t Test) int {
	if t.Verb() == VerbRead || t.Verb() == VerbAtomic {
		return 1
	}
	return 2
}

// NewLatReport computes a latency row the way perftest does: samples are
// the differences of consecutive stamps, the two largest are dropped, the
// typical value is the median of the rest (an integer mean of the middle
// pair), the maximum is the largest remaining one, and the standard
// deviation sums squares of truncated integer differences. It also
// returns the samples in microseconds in their original order (for -U).
// At least 4 stamps are needed (perftest requires 5 iterations).
func NewLatReport(in LatInput) (LatReport, []float64) {
	n := len(in.Stamps) - 1
	q := in.TicksPerUsec * float64(in.RTTFactor)
	delta := make([]uint64, n)
	unsorted := make([]float64, n)
	for i := range delta {
		delta[i] = in.Stamps[i+1] - in.Stamps[i]
		unsorted[i] = float64(delta[i]) / q
	}
	slices.Sort(delta)
	m := n - 2
	var median uint64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	var sum float64
	for i := 0; i < m; i++ {
		sum += float64(delta[i]) / q
	}
	avg := sum / float64(m)
	var stdevSum float64
	for i := 0; i < m; i++ {
		d := int32(avg - float64(delta[i])/q)
		stdevSum += float64(int32(math.Pow(float64(d), 2)))
	}
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	return LatReport{
		Size: in.Size, Iters: in.Iters,
		Min:     float64(delta[0]) / q,
		Max:     float64(delta[m]) / q,
		Typical: float64(median) / q,
		Avg:     avg,
		StdDev:  math.Sqrt(stdevSum / float64(m)),
		P99:     float64(delta[i99]) / q,
		P999:    float64(delta[i999]) / q,
	}, unsorted
}

// LatDuration computes the average latency and transactions per second of
// a -D latency run: ticks elapsed in the measured window, iters counted
// in it.
func LatDuration(ticks uint64, iters uint64, rttFactor int, ticksPerUsec float64) (avg, tps float64) {
	t := float64(ticks)
	avg = ((t / ticksPerUsec) / float64(rttFactor)) / float64(iters)
	tps = float64(iters) / (t / (ticksPerUsec * 1000000))
	return avg, tps
}
