package daemon

// The daemon's Prometheus metrics: a collector that reads the devices'
// counters, the links', the RDMA CM's, the budgets and the clients' tables
// when it is scraped (the figures have one home each, where they are
// counted; nothing here keeps a second count). docs/metrics.md lists the
// families.

import (
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/verbs"
)

// metricsNamespace starts every family of the daemon's own.
const metricsNamespace = "sroce"

// Collector returns the collector of the daemon's metrics. With perClient
// the clients' gauges are also given per uid, program name (comm) and
// device; never per pid, which would make a series per run.
func (s *Server) Collector(perClient bool) prometheus.Collector {
	return &collector{s: s, perClient: perClient}
}

// collector is an unchecked collector (Describe sends nothing): the
// families of a link's counters and the CM's drop reasons depend on what
// is served when it is scraped. The registry still checks that every
// family is consistent within a scrape.
type collector struct {
	s         *Server
	perClient bool
	descs     sync.Map // name -> *prometheus.Desc
}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

// desc returns the family name's description, made once.
func (c *collector) desc(name, help string, labels ...string) *prometheus.Desc {
	if d, ok := c.descs.Load(name); ok {
		return d.(*prometheus.Desc)
	}
	d, _ := c.descs.LoadOrStore(name, prometheus.NewDesc(name, help, labels, nil))
	return d.(*prometheus.Desc)
}

// portLabel is the port number of every device: one port each, as rxe's.
const portLabel = "1"

// PortStates are the values of sroce_port_state's state label.
var PortStates = []string{"DOWN", "ACTIVE"}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(name, help string, v uint64, labels []string, values ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc(name, help, labels...), prometheus.CounterValue, float64(v), values...)
	}
	gauge := func(name, help string, v float64, labels []string, values ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc(name, help, labels...), prometheus.GaugeValue, v, values...)
	}
	devPort := []string{"device", "port"}
	devs := c.s.devices()
	for _, sd := range devs {
		d := sd.dev
		dev := sd.name
		active := d.State() == verbs.PortActive
		for _, st := range PortStates {
			v := 0.0
			if (st == "ACTIVE") == active {
				v = 1
			}
			gauge("sroce_port_state", "The port's state (as ibv_port_state names it): 1 for the state it is in, 0 for the others.",
				v, []string{"device", "port", "state"}, dev, portLabel, st)
		}
		mode := ""
		var in Inspector
		if i, ok := d.(Inspector); ok {
			in = i
			mode = in.LinkMode()
		}
		gauge("sroce_port_info", "The port's interface, link layer and link (XDP (zero-copy), XDP (copy) or UDP), always 1.",
			1, []string{"device", "port", "interface", "link_layer", "link"}, dev, portLabel, d.Ifname(), "Ethernet", mode)
		gauge("sroce_port_mtu_bytes", "The MTU of the port's interface.", float64(d.MTU()), devPort, dev, portLabel)
		gauge("sroce_port_active_mtu_bytes", "The port's active path MTU (the largest RoCE payload), as rxe derives it from the interface MTU.",
			float64(d.ActiveMTU().Bytes()), devPort, dev, portLabel)
		if bps, ok := linkSpeed(d.Ifname()); ok {
			gauge("sroce_port_speed_bytes_per_second", "The speed of the port's interface as its driver reports it through ethtool (absent when it reports none).",
				bps, devPort, dev, portLabel)
		}
		rd := d.Device()
		for k := verbs.Counter(0); k < verbs.NumCounters; k++ {
			counter("sroce_"+k.String()+"_total", k.Help(), rd.Counter(k), devPort, dev, portLabel)
		}
		for i, e := range rd.EngineStats() {
			q := strconv.Itoa(i)
			l := []string{"device", "port", "queue"}
			counter("sroce_queue_rx_frames_total", "Frames an engine read from its receive queue's link.", e.RxFrames, l, dev, portLabel, q)
			counter("sroce_queue_tx_frames_total", "Frames an engine handed to its link.", e.TxFrames, l, dev, portLabel, q)
			counter("sroce_queue_handed_off_total", "Frames that arrived on an engine's queue for a QP of another engine and were passed on.", e.HandedOff, l, dev, portLabel, q)
			counter("sroce_queue_adopted_total", "Frames an engine took from the other engines.", e.Adopted, l, dev, portLabel, q)
			counter("sroce_queue_handoff_full_total", "Frames dropped because the ring to their engine was full.", e.HandoffFull, l, dev, portLabel, q)
		}
		if in != nil {
			for _, st := range in.LinkStats() {
				counter("sroce_link_"+metricName(st.Name)+"_total", linkHelp(st.Name), st.Value, devPort, dev, portLabel)
			}
		}
	}
	c.collectCM(ch, devs)
	c.collectBudgets(counter, gauge)
	c.collectClients(gauge, devs)
}

// collectCM reports the RDMA CM agents' counters, per device.
func (c *collector) collectCM(ch chan<- prometheus.Metric, devs []*served) {
	if c.s.cm == nil {
		return
	}
	names := map[string]string{} // engine device name -> served name
	for _, sd := range devs {
		names[sd.dev.Device().Name()] = sd.name
	}
	l := []string{"device"}
	for _, st := range c.s.cm.Stats() {
		dev, ok := names[st.Device]
		if !ok {
			continue
		}
		m := func(name, help string, typ prometheus.ValueType, v float64, labels []string, values ...string) {
			ch <- prometheus.MustNewConstMetric(c.desc(name, help, labels...), typ, v, values...)
		}
		k := st.Counters
		for _, x := range []struct {
			name, help string
			v          uint64
		}{
			{"mads_sent", "CM MADs sent on QP1.", st.MADsSent},
			{"mads_received", "CM MADs received on QP1.", st.MADsReceived},
			{"resends", "CM MADs sent again after a timeout.", k.Resends},
			{"dups_answered", "Duplicate CM MADs answered again.", k.DupsAnswered},
			{"rej_sent", "REJs sent.", k.REJSent},
			{"rej_received", "REJs received.", k.REJReceived},
			{"established", "Connections established.", k.Established},
			{"disconnects", "Connections disconnected.", k.Disconnects},
			{"timeouts", "Connection attempts that timed out.", k.Timeouts},
			{"half_open_full", "Connection requests refused because the half-open table was full.", k.HalfOpenFull},
			{"no_listener", "Connection requests for a service nobody listens on.", k.NoListener},
			{"unknown_conn", "CM MADs for a connection the agent does not know.", k.UnknownConn},
		} {
			m("sroce_cm_"+x.name+"_total", x.help, prometheus.CounterValue, float64(x.v), l, dev)
		}
		m("sroce_cm_half_open", "Passive connections not yet established.", prometheus.GaugeValue, float64(st.HalfOpen), l, dev)
		m("sroce_cm_connections", "Connections the CM holds.", prometheus.GaugeValue, float64(st.Conns), l, dev)
		reasons := make([]string, 0, len(st.Dropped))
		for r := range st.Dropped {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			m("sroce_cm_dropped_total", "CM MADs dropped or not sent, and events posted late, by reason.",
				prometheus.CounterValue, float64(st.Dropped[r]), []string{"device", "reason"}, dev, r)
		}
	}
}

type (
	counterFunc func(name, help string, v uint64, labels []string, values ...string)
	gaugeFunc   func(name, help string, v float64, labels []string, values ...string)
)

// collectBudgets reports the budgets, what all clients hold of them and
// what was refused.
func (c *collector) collectBudgets(counter counterFunc, gauge gaugeFunc) {
	st := c.s.Budgets()
	counter("sroce_accept_retries_total", "Accepts that failed (EMFILE, ENFILE, ENOMEM, ENOBUFS, ...) and were retried after a backoff.", st.AcceptRetries, nil)
	counter("sroce_connections_refused_total", "Connections closed right after accept: their uid, or the daemon, was at its connection or descriptor budget.", st.ConnsRefused, nil)
	res := []string{"resource"}
	for i, k := range ResourceKeys() {
		counter("sroce_budget_refused_total", "Requests and connections refused because a budget (one uid's or the daemon's) was reached, by resource.", st.Refused[i], res, k)
		gauge("sroce_budget_used", "What all clients hold now, by resource (bytes for reg and queue).", float64(st.Used[i]), res, k)
		gauge("sroce_budget_limit", "The budgets: of one uid (scope user) and of the daemon (scope total), by resource.", float64(st.User[i]), []string{"scope", "resource"}, "user", k)
		gauge("sroce_budget_limit", "The budgets: of one uid (scope user) and of the daemon (scope total), by resource.", float64(st.Total[i]), []string{"scope", "resource"}, "total", k)
	}
}

// clientTotals is what a group of clients holds.
type clientTotals struct {
	clients, qps, mrs int
	bytes             uint64
}

// clientKey groups clients by device, uid and program name.
type clientKey struct {
	device, comm string
	uid          uint32
}

// collectClients reports the clients' gauges: per device (each served
// device, also at 0; connections that opened none are not counted) and,
// with perClient, per uid, comm and device (connections that opened none
// under device "").
func (c *collector) collectClients(gauge gaugeFunc, devs []*served) {
	perDev := map[string]*clientTotals{}
	for _, sd := range devs {
		perDev[sd.name] = &clientTotals{}
	}
	perUser := map[clientKey]*clientTotals{}
	for _, cl := range c.s.Clients() {
		var ts []*clientTotals
		if t := perDev[cl.Device]; t != nil {
			ts = append(ts, t)
		}
		if c.perClient {
			k := clientKey{device: cl.Device, comm: strings.ToValidUTF8(cl.Comm, "\uFFFD"), uid: cl.UID}
			if perUser[k] == nil {
				perUser[k] = &clientTotals{}
			}
			ts = append(ts, perUser[k])
		}
		for _, t := range ts {
			t.clients++
			t.qps += cl.QPs
			t.mrs += cl.MRs
			t.bytes += cl.Bytes
		}
	}
	type family struct {
		name, help string
		val        func(*clientTotals) float64
	}
	dev := []family{
		{"sroce_clients", "Contexts open on the device (client connections that opened it).", func(t *clientTotals) float64 { return float64(t.clients) }},
		{"sroce_device_qps", "QPs the device's clients hold.", func(t *clientTotals) float64 { return float64(t.qps) }},
		{"sroce_device_mrs", "MRs the device's clients hold.", func(t *clientTotals) float64 { return float64(t.mrs) }},
		{"sroce_device_registered_bytes", "Bytes the device's clients have registered.", func(t *clientTotals) float64 { return float64(t.bytes) }},
	}
	for _, f := range dev {
		for name, t := range perDev {
			gauge(f.name, f.help, f.val(t), []string{"device"}, name)
		}
	}
	if !c.perClient {
		return
	}
	user := []family{
		{"sroce_client_contexts", "Client connections of a uid and program, by device (\"\" for those that opened none).", dev[0].val},
		{"sroce_client_qps", "QPs the clients of a uid and program hold, by device.", dev[1].val},
		{"sroce_client_mrs", "MRs the clients of a uid and program hold, by device.", dev[2].val},
		{"sroce_client_registered_bytes", "Bytes the clients of a uid and program have registered, by device.", dev[3].val},
	}
	labels := []string{"device", "uid", "comm"}
	for _, f := range user {
		for k, t := range perUser {
			gauge(f.name, f.help, f.val(t), labels, k.device, strconv.FormatUint(uint64(k.uid), 10), k.comm)
		}
	}
}

// linkHelps says what the links' counters count (Port.LinkStats' names).
var linkHelps = map[string]string{
	// Both links.
	"rx_bytes": "Bytes received: frames on AF_XDP, UDP payloads (BTH to ICRC) on the UDP link.",
	"tx_bytes": "Bytes sent: frames on AF_XDP, UDP payloads (BTH to ICRC) on the UDP link.",
	// The UDP link.
	"rx_packets":         "Datagrams the UDP link received and handed to the engine.",
	"tx_packets":         "Datagrams the UDP link sent.",
	"rx_truncated":       "Datagrams the UDP link received that were larger than its buffer.",
	"tx_malformed":       "Frames the UDP link could not parse and did not send.",
	"rx_ip_id_recovered": "IPv4 datagrams whose ICRC matched only with a nonzero IP Identification, which the UDP link solved for.",
	"rx_icrc_mismatch":   "IPv4 datagrams whose ICRC no IP Identification explains (the engine then drops them under icrc_error).",
	// AF_XDP: the kernel's XDP_STATISTICS and the socket's own.
	"rx_frames":        "Frames the AF_XDP sockets handed to the engine.",
	"tx_frames":        "Frames the AF_XDP sockets queued on their transmit rings.",
	"tx_completed":     "Transmit chunks back from the completion rings.",
	"rx_dropped":       "Frames the kernel dropped (too large for a UMEM chunk, or no fill buffer).",
	"rx_ring_full":     "Frames the kernel dropped because the receive ring was full.",
	"fill_ring_empty":  "Times the kernel found the fill ring empty.",
	"tx_ring_empty":    "Times the kernel found the transmit ring empty.",
	"rx_invalid_descs": "Bad addresses the kernel found in the fill rings.",
	"tx_invalid_descs": "Bad descriptors the kernel found in the transmit rings.",
	"rx_multi_buffer":  "Frames gathered from several UMEM chunks.",
	"rx_too_large":     "Received frames over the largest frame size, dropped.",
	"rx_short_buffer":  "Received frames dropped because the copy buffer was too small.",
	"rx_bad_desc":      "Receive descriptors naming a chunk the kernel did not own.",
	"tx_kicks":         "sendto calls that kicked the kernel to transmit.",
	"tx_kick_errors":   "Transmit kicks answered with an error other than EAGAIN.",
	"tx_stalls":        "Transmit kicks after which the kernel consumed nothing.",
	"tx_retries":       "Waits shortened because frames were stuck on a transmit ring.",
	"tx_resumes":       "Kicks for frames left on a transmit ring, once completions showed room.",
	"fill_wakeups":     "Fill ring kicks (the kernel asked for a wake-up).",
	"bind_retries":     "Bind attempts refused with EBUSY before one succeeded.",
}

// linkHelp returns the help of a link counter.
func linkHelp(name string) string {
	if h, ok := linkHelps[name]; ok {
		return h
	}
	return "The link's " + name + " counter."
}

// metricName makes a counter name a valid Prometheus metric name.
func metricName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// linkSpeed returns the interface's speed in bytes per second, false
// when its driver reports none.
func linkSpeed(ifname string) (float64, bool) {
	mbit, ok := netif.Speed(ifname)
	return float64(mbit) * 1e6 / 8, ok
}
