package netns

// The interop pairs again, every reliable (RC) tool both ways, under the
// two troubles a real network and a real host bring: loss, and a peer
// that stops for a while. The loss is the guest's own: netem on the RoCEv2
// frames eth0 sends, and a gact action that drops RoCEv2 frames arriving
// on eth0, 2% each way; the guest counts what it dropped. The stops are
// qemu's: the guest's process is stopped (SIGSTOP) for 100 to 300 ms at
// random moments and let run again, so its timers find the time passed at
// once and the frames sent to it meanwhile wait on the tap. Each run logs
// what it lost or how long the guest stood still, and how many packets
// each side sent again; the whole test fails if the impairment did
// nothing.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

// impairedTest skips the impaired interop tests where they cannot run.
func impairedTest(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the impaired rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
}

// TestInteropRxeLossy runs every RC tool pair with 2% of the RoCEv2
// frames lost each way between sroce and rdma_rxe.
func TestInteropRxeLossy(t *testing.T) {
	rigTestParallel(t, 100*time.Second)
	impairedTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rig := newInteropLAN(t, ctx)
	if err := rig.Guest.SetRoCELoss(ctx, lossPct); err != nil {
		t.Fatal(err)
	}
	var total rxeguest.LossCount
	var mu sync.Mutex
	opts := &interop.PairOpts{RealEnv: interop.LingerEnv, Impair: func(ctx context.Context, _ string) (func() (string, error), error) {
		before, err := rig.Guest.RoCELoss(ctx)
		if err != nil {
			return nil, err
		}
		return func() (string, error) {
			after, err := rig.Guest.RoCELoss(ctx)
			if err != nil {
				return "", err
			}
			d := after.Minus(before)
			mu.Lock()
			total = total.Plus(d)
			mu.Unlock()
			return d.Describe("rxe", "sroce"), nil
		}, nil
	}}
	for _, c := range interop.LossyCases {
		t.Run(c.Name+"/real-server", func(t *testing.T) { runPair(t, ctx, rig, c, true, opts) })
		t.Run(c.Name+"/real-client", func(t *testing.T) { runPair(t, ctx, rig, c, false, opts) })
	}
	t.Logf("all runs: %v", total.Describe("rxe", "sroce"))
	if total.OutDropped == 0 || total.InDropped == 0 {
		t.Errorf("the impairment dropped nothing in one direction over all runs (%v): the loss is not in place", total.Describe("rxe", "sroce"))
	}
}

// lossPct is the loss of the guest's impairment each way (2%).
const lossPct = 2

// TestInteropRxePaused runs every RC tool pair while the guest is stopped
// for 100 to 300 ms at random moments of the RoCEv2 traffic, at least 50
// to 400 ms apart.
func TestInteropRxePaused(t *testing.T) {
	rigTestParallel(t, 65*time.Second)
	impairedTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rig := newInteropLAN(t, ctx)
	var mu sync.Mutex
	var pauses int
	var paused time.Duration
	opts := &interop.PairOpts{RealEnv: interop.LingerEnv, Impair: func(ctx context.Context, pcap string) (func() (string, error), error) {
		before, err := tapDrops(ctx, rig)
		if err != nil {
			return nil, err
		}
		p := startPauser(rig.Guest, pcap, 50*time.Millisecond, 400*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond)
		return func() (string, error) {
			n, d, err := p.stop()
			if err != nil {
				return "", err
			}
			mu.Lock()
			pauses += n
			paused += d
			mu.Unlock()
			desc := fmt.Sprintf("the guest stood still %d times, %v in all", n, d)
			after, err := tapDrops(ctx, rig)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s; the tap dropped %d frames meanwhile", desc, after-before), nil
		}, nil
	}}
	for _, c := range interop.LossyCases {
		t.Run(c.Name+"/real-server", func(t *testing.T) { runPair(t, ctx, rig, c, true, opts) })
		t.Run(c.Name+"/real-client", func(t *testing.T) { runPair(t, ctx, rig, c, false, opts) })
	}
	t.Logf("all runs: the guest stood still %d times, %v in all", pauses, paused)
	if pauses == 0 {
		t.Error("the guest was never stopped")
	}
}

// tapDrops returns the frames the guest's tap dropped on their way to the
// guest (its transmit queue is full while qemu stands still).
func tapDrops(ctx context.Context, rig *interop.Rig) (uint64, error) {
	out, err := rig.LAN.NS.IP(ctx, "-s", "-j", "link", "show", "dev", rig.Guest.Tap())
	if err != nil {
		return 0, err
	}
	var links []struct {
		Stats struct {
			TX struct {
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return 0, fmt.Errorf("the tap's counters: %v: %q", err, out)
	}
	return links[0].Stats.TX.Dropped, nil
}

// pauser stops a guest at random moments while RoCEv2 traffic flows,
// until stopped.
type pauser struct {
	done   chan struct{}
	wg     sync.WaitGroup
	n      int
	paused time.Duration
	err    error
}

// pausePoll is how often the pauser looks for traffic.
const pausePoll = 5 * time.Millisecond

// startPauser stops g for a random time in [minStop, maxStop] whenever the
// capture pcap (of RoCEv2 frames only) has grown in the last pausePoll,
// and then leaves it alone for a random time in [minGap, maxGap], until
// stop. Pauses so land in the middle of the tools' traffic rather than in
// their TCP exchange or start-up.
func startPauser(g *rxeguest.Guest, pcap string, minGap, maxGap, minStop, maxStop time.Duration) *pauser {
	p := &pauser{done: make(chan struct{})}
	between := func(a, b time.Duration) time.Duration { return a + rand.N(b-a+1) }
	size := func() int64 {
		if fi, err := os.Stat(pcap); err == nil {
			return fi.Size()
		}
		return 0
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		last := size()
		next := time.Now().Add(between(0, minGap))
		tick := time.NewTicker(pausePoll)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			n := size()
			flowing := n != last
			last = n
			if !flowing || time.Now().Before(next) {
				continue
			}
			d := between(minStop, maxStop)
			if err := g.Pause(d); err != nil {
				p.err = err
				return
			}
			p.n++
			p.paused += d
			last = size()
			next = time.Now().Add(between(minGap, maxGap))
		}
	}()
	return p
}

// stop ends the pauses (the guest runs when it returns) and says how many
// there were and how long they took in all.
func (p *pauser) stop() (int, time.Duration, error) {
	close(p.done)
	p.wg.Wait()
	return p.n, p.paused.Round(time.Millisecond), p.err
}
