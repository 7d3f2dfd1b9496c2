package nsutil

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrNoTC is returned (wrapped) by SetNetem when the tc program (iproute2)
// is not installed; tests skip on it.
var ErrNoTC = errors.New("the tc program (iproute2) is not installed")

// ErrNoNetem is returned (wrapped) by SetNetem when the kernel has no netem
// qdisc (CONFIG_NET_SCH_NETEM); tests skip on it.
var ErrNoNetem = errors.New("the kernel has no netem qdisc (sch_netem)")

// Netem is a netem qdisc configuration: what tc-netem(8) calls loss,
// reorder, delay, duplicate and corrupt. Percentages are 0..100.
type Netem struct {
	Delay     time.Duration // added to every packet
	Jitter    time.Duration // delay variation (needs Delay)
	Loss      float64       // % of packets dropped
	Reorder   float64       // % of packets sent at once, ahead of delayed ones (needs Delay)
	Duplicate float64       // % of packets sent twice
	Corrupt   float64       // % of packets with a flipped bit
	Limit     int           // queue length in packets (tc default 1000)
}

// Args returns the netem options for tc, e.g.
// [delay 1ms loss 2% reorder 25%].
func (n Netem) Args() []string {
	var a []string
	pct := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + "%" }
	if n.Delay > 0 {
		a = append(a, "delay", n.Delay.String())
		if n.Jitter > 0 {
			a = append(a, n.Jitter.String())
		}
	}
	if n.Loss > 0 {
		a = append(a, "loss", pct(n.Loss))
	}
	if n.Reorder > 0 {
		a = append(a, "reorder", pct(n.Reorder))
	}
	if n.Duplicate > 0 {
		a = append(a, "duplicate", pct(n.Duplicate))
	}
	if n.Corrupt > 0 {
		a = append(a, "corrupt", pct(n.Corrupt))
	}
	if n.Limit > 0 {
		a = append(a, "limit", strconv.Itoa(n.Limit))
	}
	return a
}

// String returns the options as tc prints them, space-separated.
func (n Netem) String() string { return strings.Join(n.Args(), " ") }

// HaveTC reports whether the tc program is installed, or why not.
func HaveTC() error {
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("%w (netem needs it: apt-get install iproute2)", ErrNoTC)
	}
	return nil
}

// SetNetem installs (or replaces) a netem root qdisc on the interface,
// running `tc qdisc replace dev IFNAME root netem ...` inside the
// namespace. Netem acts on packets the interface sends; put it on both
// ends of a veth to disturb both directions.
func (ns *Namespace) SetNetem(ctx context.Context, ifname string, n Netem) error {
	if err := HaveTC(); err != nil {
		return err
	}
	args := append([]string{"tc", "qdisc", "replace", "dev", ifname, "root", "netem"}, n.Args()...)
	out, err := ns.Exec(ctx, args...)
	if err != nil {
		if strings.Contains(string(out), "qdisc kind is unknown") {
			return fmt.Errorf("%w: %w", ErrNoNetem, err)
		}
		return err
	}
	return nil
}

// ClearQdisc removes the root qdisc of the interface (back to the default).
func (ns *Namespace) ClearQdisc(ctx context.Context, ifname string) error {
	if err := HaveTC(); err != nil {
		return err
	}
	out, err := ns.Exec(ctx, "tc", "qdisc", "del", "dev", ifname, "root")
	if err != nil && strings.Contains(string(out), "Cannot delete qdisc with handle of zero") {
		return nil // nothing installed
	}
	return err
}

// Qdiscs returns the output of `tc qdisc show dev IFNAME` in the namespace.
func (ns *Namespace) Qdiscs(ctx context.Context, ifname string) (string, error) {
	if err := HaveTC(); err != nil {
		return "", err
	}
	out, err := ns.Exec(ctx, "tc", "qdisc", "show", "dev", ifname)
	return string(out), err
}
