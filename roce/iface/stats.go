package iface

// Counters of a port in a fixed, printable order: the engine's (named as
// rdma_rxe's hw_counters where rxe has them) and the link's.

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/udplink"
	"github.com/sroce/sroce/verbs"
	"github.com/sroce/sroce/xdp"
)

// Stat is one named counter.
type Stat struct {
	Name  string
	Value uint64
}

// Counters returns the device's counters in the engine's order (sent_pkts,
// rcvd_pkts, ... as verbs.Counter numbers them). A device on several
// queues adds what each queue's engine moved (roce.EngineStats):
// queueN_rx_frames, queueN_tx_frames, queueN_handed_off (frames it passed
// to the engine of their QP), queueN_adopted (frames it took from the
// others) and queueN_handoff_full (frames dropped because the ring to
// their engine was full).
func (p *Port) Counters() []Stat {
	m := p.dev.Counters()
	out := make([]Stat, 0, int(verbs.NumCounters))
	for c := verbs.Counter(0); c < verbs.NumCounters; c++ {
		out = append(out, Stat{c.String(), m[c.String()]})
	}
	if p.dev.Engines() > 1 {
		for i, e := range p.dev.EngineStats() {
			q := fmt.Sprintf("queue%d_", i)
			out = append(out, Stat{q + "rx_frames", e.RxFrames}, Stat{q + "tx_frames", e.TxFrames},
				Stat{q + "handed_off", e.HandedOff}, Stat{q + "adopted", e.Adopted},
				Stat{q + "handoff_full", e.HandoffFull})
		}
	}
	return out
}

// LinkStats returns the link's counters, as its kind lists them
// (LinkKind.Stats): for AF_XDP the kernel's socket statistics
// (XDP_STATISTICS: rx_dropped counts frames too large for the UMEM chunks
// or without a fill buffer) and the socket's own; for the UDP link its
// datagram counts. A port on several queues shows the sums over its
// links.
func (p *Port) LinkStats() []Stat {
	if p.kind.Stats == nil {
		return nil
	}
	var out []Stat
	for _, l := range p.links {
		st := p.kind.Stats(l)
		if out == nil {
			out = st
			continue
		}
		for i := range out {
			out[i].Value += st[i].Value
		}
	}
	return out
}

// udpStats lists the UDP link's counters (LinkKind.Stats).
func udpStats(l roce.Link) []Stat {
	s := l.(*udplink.Link).Stats()
	return []Stat{
		{"rx_packets", s.RxPackets}, {"tx_packets", s.TxPackets},
		{"rx_bytes", s.RxBytes}, {"tx_bytes", s.TxBytes},
		{"rx_truncated", s.RxTruncated}, {"tx_malformed", s.TxMalformed},
		{"rx_ip_id_recovered", s.RxIPIDRecovered}, {"rx_icrc_mismatch", s.RxICRCMismatch},
	}
}

// xdpStats lists an AF_XDP link's counters (LinkKind.Stats).
func xdpStats(l roce.Link) []Stat { return socketStats(l.(*xdp.Link).Socket().Stats()) }

// socketStats lists one AF_XDP socket's counters; a port on several
// queues adds them up.
func socketStats(s xdp.Stats) []Stat {
	return []Stat{
		{"rx_frames", s.RxFrames}, {"rx_bytes", s.RxBytes},
		{"tx_frames", s.TxFrames}, {"tx_bytes", s.TxBytes},
		{"tx_completed", s.TxCompleted},
		{"rx_dropped", s.RxDropped}, {"rx_ring_full", s.RxRingFull},
		{"fill_ring_empty", s.FillRingEmpty}, {"tx_ring_empty", s.TxRingEmpty},
		{"rx_invalid_descs", s.RxInvalidDescs}, {"tx_invalid_descs", s.TxInvalidDescs},
		{"rx_multi_buffer", s.RxMultiBuffer}, {"rx_too_large", s.RxTooLarge},
		{"rx_short_buffer", s.RxShortBuffer}, {"rx_bad_desc", s.RxBadDesc},
		{"tx_kicks", s.TxKicks}, {"tx_kick_errors", s.TxKickErrors}, {"tx_stalls", s.TxStalls},
		{"tx_retries", s.TxRetries}, {"tx_resumes", s.TxResumes},
		{"fill_wakeups", s.FillWakeups}, {"bind_retries", s.BindRetries},
	}
}

// Stat returns one counter by name, from Counters or LinkStats, and
// whether it exists.
func (p *Port) Stat(name string) (uint64, bool) {
	for _, s := range p.Counters() {
		if s.Name == name {
			return s.Value, true
		}
	}
	for _, s := range p.LinkStats() {
		if s.Name == name {
			return s.Value, true
		}
	}
	return 0, false
}

// Capabilities an AF_XDP socket with an XDP program needs.
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capSysAdmin = 21
	capBPF      = 39
)

// missingCaps lists the capabilities AF_XDP needs that the process lacks.
type missingCaps []string

func (m missingCaps) Error() string { return strings.Join(m, ", ") }

// xdpPrivileges returns nil when the process may load the steering program
// and open AF_XDP sockets (CAP_NET_ADMIN, CAP_NET_RAW, and CAP_BPF or
// CAP_SYS_ADMIN), or the missing capabilities.
func xdpPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return missingCaps{fmt.Sprintf("capabilities unknown: %v", err)}
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var m missingCaps
	if !has(capNetAdmin) {
		m = append(m, "CAP_NET_ADMIN")
	}
	if !has(capNetRaw) {
		m = append(m, "CAP_NET_RAW")
	}
	if !has(capBPF) && !has(capSysAdmin) {
		m = append(m, "CAP_BPF")
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
