package xdp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The raw AF_XDP ceiling: copy-mode sockets over a veth pair between two
// namespaces (MTU 9000, steering program attached on the receiver). Later
// engine benchmarks compare against these numbers.
//
//	go test -run '^$' -bench . ./xdp/

var benchSizes = []int{64, 106, 1514, 4200}

// BenchmarkBlast sends frames one way as fast as Transmit takes them and
// counts what the receiver gets with Receive/Release (no copy out). One op
// is one frame received; rx-Mpps is the received rate and loss-% the share
// of sent frames that did not arrive.
func BenchmarkBlast(b *testing.B) {
	p := newVethPair(b, 9000, 1)
	tx := openIn(b, p.nsA, p.ifA, 0, Options{})
	rx := openIn(b, p.nsB, p.ifB, 0, Options{})
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			blast(b, p, size, func(frames [][]byte) int {
				n, err := tx.Transmit(frames)
				if err != nil {
					panic(err)
				}
				return n
			}, func(stop *atomic.Bool, count *atomic.Int64) {
				frames := make([]Frame, 64)
				for !stop.Load() {
					n, _ := rx.Receive(frames)
					if n == 0 {
						rx.Wait(time.Millisecond)
						continue
					}
					rx.Release(frames[:n])
					count.Add(int64(n))
				}
			})
		})
	}
	st := rx.Stats()
	b.Logf("receiver: %d frames; kernel drops: rx ring full %d, no fill buffer %d (fill ring empty %d)",
		st.RxFrames, st.RxRingFull, st.RxDropped, st.FillRingEmpty)
}

// BenchmarkLinkBlast is BenchmarkBlast through the Link adapter: frames are
// copied out of the UMEM by ReadBatch and WriteBatch waits when the kernel
// is behind.
func BenchmarkLinkBlast(b *testing.B) {
	p := newVethPair(b, 9000, 1)
	var la, lb *Link
	must(b, p.nsA.Do(func() (err error) {
		la, err = OpenLink(p.ifA, 0, Options{})
		return err
	}))
	b.Cleanup(func() { la.Close() })
	must(b, p.nsB.Do(func() (err error) {
		lb, err = OpenLink(p.ifB, 0, Options{})
		return err
	}))
	b.Cleanup(func() { lb.Close() })
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			blast(b, p, size, func(frames [][]byte) int {
				n, err := la.WriteBatch(frames)
				if err != nil && err != ErrTxFull {
					panic(err)
				}
				return n
			}, func(stop *atomic.Bool, count *atomic.Int64) {
				bufs := make([][]byte, 64)
				for i := range bufs {
					bufs[i] = make([]byte, DefaultMaxFrameSize)
				}
				sizes := make([]int, 64)
				for !stop.Load() {
					n, _ := lb.ReadBatch(bufs, sizes, time.Millisecond)
					count.Add(int64(n))
				}
			})
		})
	}
}

func blast(b *testing.B, p *vethPair, size int, send func([][]byte) int, recv func(*atomic.Bool, *atomic.Int64)) {
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = p.frameAtoB(size, byte(i))
	}
	var stop atomic.Bool
	var count atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		recv(&stop, &count)
	}()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent := 0
	deadline := start.Add(30 * time.Second)
	for count.Load() < int64(b.N) {
		sent += send(batch)
		if sent&0xfff < 64 && time.Now().After(deadline) {
			break
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	got := count.Load()
	b.ReportMetric(float64(got)/elapsed.Seconds()/1e6, "rx-Mpps")
	b.ReportMetric(float64(got)*float64(size)*8/elapsed.Seconds()/1e9, "rx-Gbit/s")
	if sent > 0 {
		b.ReportMetric(100*(1-float64(got)/float64(sent)), "loss-%")
	}
	// Let in-flight frames drain before the next size.
	time.Sleep(20 * time.Millisecond)
}

// BenchmarkPingPong bounces one frame between two sockets; one op is one
// round trip, with both ends blocking in Wait between frames.
func BenchmarkPingPong(b *testing.B) {
	p := newVethPair(b, 1500, 1)
	a := openIn(b, p.nsA, p.ifA, 0, Options{})
	c := openIn(b, p.nsB, p.ifB, 0, Options{})
	ping := [][]byte{p.frameAtoB(106, 1)}
	pong := [][]byte{p.frameBtoA(106, 2)}
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		frames := make([]Frame, 8)
		for !stop.Load() {
			n, _ := c.Receive(frames)
			if n == 0 {
				c.Wait(10 * time.Millisecond)
				continue
			}
			c.Release(frames[:n])
			for i := 0; i < n; i++ {
				c.Transmit(pong)
			}
		}
	}()
	frames := make([]Frame, 8)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a.Transmit(ping)
		got := 0
		for got == 0 {
			n, _ := a.Receive(frames)
			if n == 0 {
				if ready, _ := a.Wait(time.Second); !ready {
					b.Fatalf("pong %d lost; stats %+v", i, a.Stats())
				}
				continue
			}
			a.Release(frames[:n])
			got += n
		}
	}
	b.StopTimer()
	stop.Store(true)
	c.Wake()
	<-done
}
