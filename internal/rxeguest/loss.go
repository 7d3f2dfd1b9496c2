package rxeguest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Runner runs a shell script somewhere (a guest, or a network namespace
// of this host) and returns its output and exit status.
type Runner interface {
	Run(ctx context.Context, script string) (Result, error)
}

// SetRoCELoss makes the guest drop about pct percent of the RoCEv2 frames
// (UDP port 4791) at random each way: its egress goes through a prio
// qdisc whose second band, where a u32 filter sends UDP port 4791, is
// netem with that loss; its ingress has a u32 filter with a gact action
// that drops one frame in round(100/pct). Other traffic (TCP exchanges,
// ARP) passes untouched. pct must be in (0, 100].
//
// One RoCEv2 frame is spared: a CM DREQ the guest sends (a MAD of class
// 7, attribute 0x0015, to QP1). Linux's CM stops resending a DREQ when
// its ID is destroyed, and rping, ucmatose and perftest destroy their IDs
// right after rdma_disconnect: a lost DREQ is never sent again, and the
// peer's program (sroce's, or rping on rxe alike) waits for a
// disconnection that never comes. The DREQs sroce sends, and every other
// CM MAD both ways, are dropped like any frame.
func (g *Guest) SetRoCELoss(ctx context.Context, pct float64) error {
	return SetRoCELoss(ctx, g, g.cfg.Name, pct)
}

// SetRoCELoss is Guest.SetRoCELoss on the eth0 of wherever r runs its
// scripts, whose name the errors give.
func SetRoCELoss(ctx context.Context, r Runner, name string, pct float64) error {
	if !(pct > 0 && pct <= 100) {
		return fmt.Errorf("a loss of %v%% is not a percentage in (0, 100]", pct)
	}
	oneIn := max(1, int(100/pct+0.5))
	res, err := r.Run(ctx, fmt.Sprintf(`set -e
tc qdisc replace dev eth0 root handle 1: prio bands 2 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
tc qdisc add dev eth0 parent 1:2 handle 20: netem loss %s%%
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff match u32 0x00000001 0x00ffffff at 32 match u8 0x07 0xff at 49 match u16 0x0015 0xffff at 64 flowid 1:1
tc filter add dev eth0 parent 1: protocol ip prio 2 u32 match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:2
tc qdisc add dev eth0 ingress
tc filter add dev eth0 parent ffff: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff action gact ok random netrand drop %d
tc qdisc show dev eth0
tc filter show dev eth0 ingress`, strconv.FormatFloat(pct, 'f', -1, 64), oneIn))
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return fmt.Errorf("setting the loss of %s: %w", name, err)
	}
	return nil
}

// LossCount is what a guest's RoCEv2 loss (SetRoCELoss) counted: frames
// the guest sent (Out) and received (In), and how many of each it dropped.
type LossCount struct {
	OutSeen, OutDropped uint64
	InSeen, InDropped   uint64
}

// Minus returns the counts of c less those of o (c read after o).
func (c LossCount) Minus(o LossCount) LossCount {
	return LossCount{c.OutSeen - o.OutSeen, c.OutDropped - o.OutDropped, c.InSeen - o.InSeen, c.InDropped - o.InDropped}
}

// Plus returns the sum of c and o.
func (c LossCount) Plus(o LossCount) LossCount {
	return LossCount{c.OutSeen + o.OutSeen, c.OutDropped + o.OutDropped, c.InSeen + o.InSeen, c.InDropped + o.InDropped}
}

// Describe says what was dropped each way, naming the guest's side and
// its peer's ("rxe", "sroce").
func (c LossCount) Describe(guest, peer string) string {
	return fmt.Sprintf("lost %s->%s %d of %d RoCEv2 frames, %s->%s %d of %d",
		guest, peer, c.OutDropped, c.OutSeen, peer, guest, c.InDropped, c.InSeen)
}

// tcStats are the counters tc prints for a qdisc or an action.
type tcStats struct {
	Kind    string `json:"kind"`
	Packets uint64 `json:"packets"`
	Drops   uint64 `json:"drops"`
}

// RoCELoss reads the counters of the loss SetRoCELoss put in place: netem
// counts the frames it passed and those it dropped, the gact action every
// frame it saw and those it dropped.
func (g *Guest) RoCELoss(ctx context.Context) (LossCount, error) {
	return RoCELoss(ctx, g, g.cfg.Name)
}

// RoCELoss is Guest.RoCELoss on the eth0 of wherever r runs its scripts,
// whose name the errors give.
func RoCELoss(ctx context.Context, r Runner, name string) (LossCount, error) {
	res, err := r.Run(ctx, "tc -s -j qdisc show dev eth0 && echo && tc -s -j filter show dev eth0 ingress")
	if err == nil {
		err = res.Err()
	}
	if err != nil {
		return LossCount{}, fmt.Errorf("reading the loss counters of %s: %w", name, err)
	}
	qdiscJSON, filterJSON, _ := strings.Cut(string(res.Stdout), "\n")
	var qdiscs []tcStats
	if err := json.Unmarshal([]byte(qdiscJSON), &qdiscs); err != nil {
		return LossCount{}, fmt.Errorf("the qdiscs of %s: %w: %q", name, err, qdiscJSON)
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
		return LossCount{}, fmt.Errorf("the ingress filters of %s: %w: %q", name, err, filterJSON)
	}
	var c LossCount
	netem, gact := false, false
	for _, q := range qdiscs {
		if q.Kind == "netem" {
			c.OutSeen, c.OutDropped, netem = q.Packets+q.Drops, q.Drops, true
		}
	}
	for _, f := range filters {
		for _, a := range f.Options.Actions {
			if a.Kind == "gact" {
				c.InSeen, c.InDropped, gact = a.Stats.Packets, a.Stats.Drops, true
			}
		}
	}
	if !netem || !gact {
		return c, fmt.Errorf("the loss of %s is gone (netem %v, gact %v):\n%s", name, netem, gact, res.Stdout)
	}
	return c, nil
}
