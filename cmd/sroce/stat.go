package main

// sroce stat: the counters of a sroce device: the running daemon's device
// on the interface when there is one; otherwise a device lives in the
// process that opened it, so stat opens a fresh one on the interface,
// optionally keeps it listening for a while, and prints its port state,
// the engine's counters and the link's (see statAbout).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/tools/device"
	"github.com/sroce/sroce/verbs"
)

// statAbout is the description printed by "sroce stat -h".
const statAbout = `
Stat prints the counters of a sroce device: the engine's, named like
rdma_rxe's hw_counters where rxe has the same one (sent_pkts, rcvd_pkts,
duplicate_request, out_of_seq_request, rcvd_seq_err, retry_exceeded_err,
link_downed, ...) plus what the engine drops for other reasons (icrc_error,
unknown_qpn, bad_dgid, ...), and the link's: for AF_XDP the kernel's socket
statistics (rx_dropped counts frames too large for a UMEM chunk or without a
fill buffer) and the socket's own; for the UDP link its datagram counts.

What it shows. When a sroce daemon serves the interface (at --socket, or
SROCE_SOCKET, or the daemon's usual place), stat prints the counters of the
daemon's device, which every program run through the daemon uses: it opens
a context on the device to ask (the daemon tells a context about its own
device only, and how many clients it has, not who they are).
Otherwise a device exists only inside the process that opened it, and its
counters die with it; then stat opens a fresh device on the interface (the
one a tool would get, with --mode), keeps it open for --for (default 0: just open it) counting whatever
RoCEv2 traffic reaches it, for example packets a peer still sends to a QP
that no longer exists (unknown_qpn), and prints the port state and the
counters. It cannot show the counters of a device another program opened
in its own process; "sroce demo" prints its devices' counters at the end of its run. While
another sroce process holds the interface's AF_XDP queue or UDP port 4791,
stat cannot open the device and says so.

--json prints one JSON object instead of the table; --nonzero hides the
counters that are zero.`

// runStat implements "sroce stat".
func runStat(e *env, args []string) int {
	f := newFlags(e, "stat", "sroce stat [-d IF] [--socket PATH] [--mode "+linkModes+"] [--for DURATION] [--json] [--nonzero]", statAbout)
	var dev string
	f.StringVar(&dev, "device", "", "network interface `IF` (default: the one of the default route)")
	f.Short('d', "device")
	f.Alias("ib-dev", "device")
	mode := f.String("mode", "auto", "link to open (`MODE`): "+linkModeHelp)
	listen := f.Duration("for", 0, "keep the device open this long, counting what arrives")
	asJSON := f.Bool("json", false, "print one JSON object")
	nonzero := f.Bool("nonzero", false, "print only counters that are not zero")
	socket := f.String("socket", "", "the daemon's socket (default: SROCE_SOCKET, or the place for this user)")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("stat takes no arguments")
	}
	m, msg := parseLinkMode("--mode", *mode)
	if msg != "" {
		return f.usageError(msg)
	}
	if *listen < 0 {
		return f.usageError(badValue("--for", *listen, "must not be negative"))
	}
	var err error
	if dev == "" {
		if dev, err = device.DefaultRouteInterface(); err != nil {
			fmt.Fprintf(e.Stderr, "sroce stat: %v\n", err)
			return exitProblem
		}
	}
	if snap := daemonStat(*socket, dev); snap != nil {
		if *asJSON {
			b, _ := json.MarshalIndent(snap, "", "  ")
			e.Stdout.Write(append(b, '\n'))
			return exitOK
		}
		printStat(e.Stdout, snap, *nonzero)
		return exitOK
	}
	p, err := iface.Open(context.Background(), dev, iface.Options{Mode: m, AllowDown: true})
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce stat: %v\n", err)
		return exitProblem
	}
	if *listen > 0 {
		select {
		case <-time.After(*listen):
		case <-p.Lost():
		}
	}
	snap := statSnapshot(p, *listen)
	p.Close()
	if *asJSON {
		b, _ := json.MarshalIndent(snap, "", "  ")
		e.Stdout.Write(append(b, '\n'))
		return exitOK
	}
	printStat(e.Stdout, snap, *nonzero)
	return exitOK
}

// statData is what stat prints; its JSON form is the --json output.
type statData struct {
	Device     string            `json:"device"`
	Interface  string            `json:"interface"`
	LinkMode   string            `json:"link_mode"`
	Reason     string            `json:"link_mode_reason"`
	PortState  string            `json:"port_state"`
	ActiveMTU  int               `json:"active_mtu"`
	Seconds    float64           `json:"seconds_open"`
	Engine     []iface.Stat      `json:"-"`
	Link       []iface.Stat      `json:"-"`
	EngineMap  map[string]uint64 `json:"counters"`
	LinkMap    map[string]uint64 `json:"link_counters"`
	CM         []iface.Stat      `json:"-"`
	CMMap      map[string]uint64 `json:"cm_counters,omitempty"`
	PortErr    string            `json:"port_error,omitempty"`
	Limitation string            `json:"note"`
	Daemon     string            `json:"daemon_socket,omitempty"`
	Clients    int               `json:"daemon_clients,omitempty"`
}

// daemonStat returns the counters of the device the sroce daemon at socket
// (default: its usual place) serves on interface ifname, or nil when no
// daemon serves it.
func daemonStat(socket, ifname string) *statData {
	if socket == "" {
		socket = sockpath.Find()
	}
	st, err := client.Stats(socket, "sroce_"+ifname)
	if err != nil {
		return nil
	}
	d := &statData{Device: st.Device, Interface: st.Interface, LinkMode: st.LinkMode, Reason: st.Reason,
		PortState: st.PortState, ActiveMTU: st.ActiveMTU, Seconds: st.Seconds, PortErr: st.PortErr,
		EngineMap: map[string]uint64{}, LinkMap: map[string]uint64{}, Daemon: socket, Clients: st.Clients,
		Limitation: "the device of a running sroce daemon"}
	for _, c := range st.Engine {
		d.Engine = append(d.Engine, iface.Stat{Name: c.Name, Value: c.Value})
		d.EngineMap[c.Name] = c.Value
	}
	for _, c := range st.Link {
		d.Link = append(d.Link, iface.Stat{Name: c.Name, Value: c.Value})
		d.LinkMap[c.Name] = c.Value
	}
	if len(st.CM) > 0 {
		d.CMMap = map[string]uint64{}
	}
	for _, c := range st.CM {
		d.CM = append(d.CM, iface.Stat{Name: c.Name, Value: c.Value})
		d.CMMap[c.Name] = c.Value
	}
	return d
}

// statSnapshot reads a port's state and counters.
func statSnapshot(p *iface.Port, open time.Duration) *statData {
	st := "PORT_ACTIVE"
	if p.State() != verbs.PortActive {
		st = "PORT_DOWN"
	}
	d := &statData{
		Device: p.Device().Name(), Interface: p.Ifname(), LinkMode: p.LinkMode(), Reason: p.Reason(),
		PortState: st, ActiveMTU: p.PathMTU(), Seconds: open.Seconds(),
		Engine: p.Counters(), Link: p.LinkStats(),
		EngineMap: map[string]uint64{}, LinkMap: map[string]uint64{},
		Limitation: "a fresh device opened by sroce stat; devices of other processes are not visible",
	}
	if err := p.Err(); err != nil && err != iface.ErrClosed {
		d.PortErr = err.Error()
	}
	for _, s := range d.Engine {
		d.EngineMap[s.Name] = s.Value
	}
	for _, s := range d.Link {
		d.LinkMap[s.Name] = s.Value
	}
	return d
}

// printStat prints the counters as a two-column table.
func printStat(w io.Writer, d *statData, nonzero bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: %s, %s, active_mtu %d\n", d.Device, d.Interface, d.LinkMode, d.PortState, d.ActiveMTU)
	if d.Daemon != "" {
		fmt.Fprintf(&b, "the device of the sroce daemon at %s, up %.0fs, serving %d client(s)\n", d.Daemon, d.Seconds, d.Clients)
	} else if d.Seconds > 0 {
		fmt.Fprintf(&b, "a fresh device, open for %gs; devices of other processes are not visible (see sroce help stat)\n", d.Seconds)
	} else {
		fmt.Fprintf(&b, "a fresh device; devices of other processes are not visible (see sroce help stat)\n")
	}
	if d.PortErr != "" {
		fmt.Fprintf(&b, "port: %s\n", d.PortErr)
	}
	section := func(title string, stats []iface.Stat) {
		fmt.Fprintf(&b, "\n%s:\n", title)
		for _, s := range stats {
			if nonzero && s.Value == 0 {
				continue
			}
			fmt.Fprintf(&b, "  %-24s %d\n", s.Name, s.Value)
		}
	}
	section("engine counters", d.Engine)
	what := "UDP socket"
	if d.LinkMode != iface.LinkUDP {
		what = "AF_XDP socket"
	}
	section("link counters ("+what+")", d.Link)
	if len(d.CM) > 0 {
		section("RDMA CM counters (QP1)", d.CM)
	}
	io.WriteString(w, b.String())
}
