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
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/rxeguest"
)

// impairedCases are the RC tools, both atomic operations included; sizes
// and counts give a few hundred packets each way, so that 2% loss drops
// several in most runs.
var impairedCases = []interopCase{
	{"rc-pingpong", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 200 -s 4096 -m 1024 -c"},
	{"send-bw", "send-bw", "ib_send_bw", "-x 1 -n 300 -s 4096 -m 1024"},
	{"write-bw", "write-bw", "ib_write_bw", "-x 1 -n 300 -s 4096 -m 1024"},
	{"read-bw", "read-bw", "ib_read_bw", "-x 1 -n 300 -s 4096 -m 1024"},
	{"atomic-bw-fadd", "atomic-bw", "ib_atomic_bw", "-x 1 -n 500 -A FETCH_AND_ADD"},
	{"atomic-bw-cmpswp", "atomic-bw", "ib_atomic_bw", "-x 1 -n 500 -A CMP_AND_SWAP"},
	{"send-lat", "send-lat", "ib_send_lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"write-lat", "write-lat", "ib_write_lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"read-lat", "read-lat", "ib_read_lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"atomic-lat-fadd", "atomic-lat", "ib_atomic_lat", "-x 1 -n 500 -A FETCH_AND_ADD"},
	{"atomic-lat-cmpswp", "atomic-lat", "ib_atomic_lat", "-x 1 -n 500 -A CMP_AND_SWAP"},
}

// lingerEnv makes ibv_rc_pingpong keep its QP a second before destroying
// it (rxeguest.LingerLib). The tool has no closing handshake: each side
// ends at its own last completion, and when the ACK of the peer's last
// message is lost the peer retransmits to a QP that is gone and fails,
// whatever the peer is (two rxe guests fail the same way). sroce's tools
// linger on their own; perftest's tools close with a TCP handshake that
// keeps both QPs until each side has its completions.
func lingerEnv(c interopCase) string {
	if strings.HasSuffix(c.real, "_pingpong") {
		return "LD_PRELOAD=" + rxeguest.LingerLib + " SROCE_LINGER_MS=1000"
	}
	return ""
}

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
	impairedTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	l := newInteropLAN(t, ctx)
	if err := l.setGuestLoss(ctx, lossOneIn); err != nil {
		t.Fatal(err)
	}
	var total lossCount
	var mu sync.Mutex
	opts := &pairOpts{realEnv: lingerEnv, impair: func(t *testing.T, ctx context.Context, _ string) func() string {
		before, err := l.guestLoss(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return func() string {
			after, err := l.guestLoss(ctx)
			if err != nil {
				t.Error(err)
				return "the loss counters are unreadable"
			}
			d := after.minus(before)
			mu.Lock()
			total = total.plus(d)
			mu.Unlock()
			return d.String()
		}
	}}
	for _, c := range impairedCases {
		t.Run(c.name+"/real-server", func(t *testing.T) { l.runPair(t, ctx, c, true, opts) })
		t.Run(c.name+"/real-client", func(t *testing.T) { l.runPair(t, ctx, c, false, opts) })
	}
	t.Logf("all runs: %v", total)
	if total.outDropped == 0 || total.inDropped == 0 {
		t.Errorf("the impairment dropped nothing in one direction over all runs (%v): the loss is not in place", total)
	}
}

// lossOneIn is the loss of the guest's impairment each way: one frame in
// lossOneIn (2%).
const lossOneIn = 50

// setGuestLoss makes the guest drop one in oneIn RoCEv2 frames at random
// each way: its egress goes through a prio qdisc whose second band, where
// a u32 filter sends UDP port 4791, is netem; its ingress has a u32 filter
// with a gact action. Other traffic (the tools' TCP exchange, ARP) passes
// untouched.
func (l *interopLAN) setGuestLoss(ctx context.Context, oneIn int) error {
	pct := strconv.FormatFloat(100/float64(oneIn), 'f', -1, 64)
	res, err := l.guest.Run(ctx, fmt.Sprintf(`set -e
tc qdisc replace dev eth0 root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
tc qdisc add dev eth0 parent 1:2 handle 20: netem loss %s%%
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:2
tc qdisc add dev eth0 ingress
tc filter add dev eth0 parent ffff: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action gact ok random netrand drop %d
tc qdisc show dev eth0
tc filter show dev eth0 ingress`, pct, oneIn))
	if err != nil {
		return fmt.Errorf("setting the guest's loss: %w", err)
	}
	if err := res.Err(); err != nil {
		return fmt.Errorf("setting the guest's loss: %w", err)
	}
	return nil
}

// lossCount is what the guest's impairment counted: RoCEv2 frames it sent
// (out) and received (in), and how many of each it dropped.
type lossCount struct {
	outSeen, outDropped uint64
	inSeen, inDropped   uint64
}

func (c lossCount) minus(o lossCount) lossCount {
	return lossCount{c.outSeen - o.outSeen, c.outDropped - o.outDropped, c.inSeen - o.inSeen, c.inDropped - o.inDropped}
}

func (c lossCount) plus(o lossCount) lossCount {
	return lossCount{c.outSeen + o.outSeen, c.outDropped + o.outDropped, c.inSeen + o.inSeen, c.inDropped + o.inDropped}
}

// String says what was dropped each way.
func (c lossCount) String() string {
	return fmt.Sprintf("lost rxe->sroce %d of %d RoCEv2 frames, sroce->rxe %d of %d",
		c.outDropped, c.outSeen, c.inDropped, c.inSeen)
}

// tcStats are the counters tc prints for a qdisc or an action.
type tcStats struct {
	Kind    string `json:"kind"`
	Packets uint64 `json:"packets"`
	Drops   uint64 `json:"drops"`
}

// guestLoss reads the impairment's counters: netem counts the frames it
// passed and those it dropped, the gact action every frame it saw and
// those it dropped.
func (l *interopLAN) guestLoss(ctx context.Context) (lossCount, error) {
	res, err := l.guest.Run(ctx, "tc -s -j qdisc show dev eth0 && echo && tc -s -j filter show dev eth0 ingress")
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return lossCount{}, fmt.Errorf("reading the guest's loss counters: %w", err)
	}
	qdiscJSON, filterJSON, _ := strings.Cut(string(res.Stdout), "\n")
	var qdiscs []tcStats
	if err := json.Unmarshal([]byte(qdiscJSON), &qdiscs); err != nil {
		return lossCount{}, fmt.Errorf("the guest's qdiscs: %w: %q", err, qdiscJSON)
	}
	var filters []struct {
		Options struct {
			Actions []struct {
				Kind  string  `json:"kind"`
				Stats tcStats `json:"stats"`
			} `json:"actions"`
		} `json:"options"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(filterJSON)), &filters); err != nil {
		return lossCount{}, fmt.Errorf("the guest's ingress filters: %w: %q", err, filterJSON)
	}
	var c lossCount
	netem, gact := false, false
	for _, q := range qdiscs {
		if q.Kind == "netem" {
			c.outSeen, c.outDropped, netem = q.Packets+q.Drops, q.Drops, true
		}
	}
	for _, f := range filters {
		for _, a := range f.Options.Actions {
			if a.Kind == "gact" {
				c.inSeen, c.inDropped, gact = a.Stats.Packets, a.Stats.Drops, true
			}
		}
	}
	if !netem || !gact {
		return c, fmt.Errorf("the guest's impairment is gone (netem %v, gact %v):\n%s", netem, gact, res.Stdout)
	}
	return c, nil
}

// TestInteropRxePaused runs every RC tool pair while the guest is stopped
// for 100 to 300 ms at random moments of the RoCEv2 traffic, at least 50
// to 400 ms apart.
func TestInteropRxePaused(t *testing.T) {
	impairedTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	l := newInteropLAN(t, ctx)
	var mu sync.Mutex
	var pauses int
	var paused time.Duration
	opts := &pairOpts{realEnv: lingerEnv, impair: func(t *testing.T, ctx context.Context, pcap string) func() string {
		before, err := l.tapDrops(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := startPauser(l.guest, pcap, 50*time.Millisecond, 400*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond)
		return func() string {
			n, d, err := p.stop()
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			pauses += n
			paused += d
			mu.Unlock()
			desc := fmt.Sprintf("the guest stood still %d times, %v in all", n, d)
			after, err := l.tapDrops(ctx)
			if err != nil {
				t.Error(err)
				return desc
			}
			return fmt.Sprintf("%s; the tap dropped %d frames meanwhile", desc, after-before)
		}
	}}
	for _, c := range impairedCases {
		t.Run(c.name+"/real-server", func(t *testing.T) { l.runPair(t, ctx, c, true, opts) })
		t.Run(c.name+"/real-client", func(t *testing.T) { l.runPair(t, ctx, c, false, opts) })
	}
	t.Logf("all runs: the guest stood still %d times, %v in all", pauses, paused)
	if pauses == 0 {
		t.Error("the guest was never stopped")
	}
}

// tapDrops returns the frames the guest's tap dropped on their way to the
// guest (its transmit queue is full while qemu stands still).
func (l *interopLAN) tapDrops(ctx context.Context) (uint64, error) {
	out, err := l.lan.NS.IP(ctx, "-s", "-j", "link", "show", "dev", l.guest.Tap())
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

// resentInCapture counts the packets each side sent again in a capture:
// requests and responses whose PSN that side had already sent to the same
// QP.
func resentInCapture(pcap string, guest netip.Addr) string {
	frames, _, err := rxeguest.ReadPcapFile(pcap)
	if err != nil {
		return fmt.Sprintf("the capture is unreadable: %v", err)
	}
	type key struct {
		fromGuest, request bool
		qpn                bth.QPN
		psn                bth.PSN
	}
	seen := map[key]bool{}
	var resent [2][2]int // [fromGuest][request]
	var p bth.Packet
	for _, f := range frames {
		if p.Parse(f.Data) != nil || p.Info().Service != bth.ServiceRC {
			continue
		}
		b := p.BTH()
		k := key{p.SrcAddr().Unmap() == guest.Unmap(), p.Info().Request, b.DestQP(), b.PSN()}
		if seen[k] {
			resent[b2i(k.fromGuest)][b2i(k.request)]++
		}
		seen[k] = true
	}
	return fmt.Sprintf("sent again: rxe %d requests and %d responses, sroce %d requests and %d responses",
		resent[1][1], resent[1][0], resent[0][1], resent[0][0])
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
