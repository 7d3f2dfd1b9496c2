package main

// sroce devinfo: what ibv_devinfo shows of an rdma_rxe device, for the
// sroce device on an interface: the running daemon's when it serves the
// interface, otherwise a fresh device opened (roce/iface), described and
// closed again, the device any sroce tool would get on that interface at
// this moment.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/internal/sockpath"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/tools/device"
	"github.com/sroce/sroce/verbs"
)

// devinfoAbout is the description printed by "sroce devinfo -h".
const devinfoAbout = `
Devinfo prints what ibv_devinfo prints for an rdma_rxe device, for the sroce
device on a network interface: the node GUID rxe derives from the MAC
address (EUI-64), the port state (ACTIVE when the interface is up with
carrier), max_mtu and active_mtu (the path MTU: interface MTU - 80 rounded
down to 256..4096, as rxe computes it), and the GID table with its indexes
(the numbers -g / -x take) and types, all "RoCE v2". sroce adds the network
interface, the link mode (XDP zero-copy or copy, with the attach mode of the
steering program, or UDP) and why that mode was chosen.

When a sroce daemon serves the interface (at --socket, SROCE_SOCKET or the
daemon's usual place), devinfo describes the daemon's device, the one
programs run through the daemon use. Otherwise a device exists inside the
process that opened it: devinfo opens one on the interface (as a tool
would, with --mode), describes it and closes it. If the link cannot be opened right now (another sroce
process holds the AF_XDP queue or UDP port 4791) it says so and shows what
the interface alone tells.

Without -d it describes the interface of the default route. -l lists the
interfaces a device can be opened on. -v adds the device limits (max_qp,
max_qp_wr, ...).`

// runDevinfo implements "sroce devinfo".
func runDevinfo(e *env, args []string) int {
	f := newFlags(e, "devinfo", "sroce devinfo [-d IF] [-l] [-v] [--socket PATH] [--mode "+linkModes+"]", devinfoAbout)
	var dev string
	f.StringVar(&dev, "device", "", "network interface `IF` (default: the one of the default route)")
	f.Short('d', "device")
	f.Alias("ib-dev", "device")
	list := f.Bool("list", false, "list the interfaces a device can be opened on")
	f.Short('l', "list")
	verbose := f.Bool("verbose", false, "also print the device limits")
	f.Short('v', "verbose")
	mode := f.String("mode", "auto", "link to open (`MODE`): "+linkModeHelp)
	socket := f.String("socket", "", "the daemon's socket (default: SROCE_SOCKET, or the place for this user)")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 0 {
		return f.usageError("devinfo takes no arguments")
	}
	m, msg := parseLinkMode("--mode", *mode)
	if msg != "" {
		return f.usageError(msg)
	}
	var err error
	if *list {
		if err := listInterfaces(e.Stdout); err != nil {
			fmt.Fprintf(e.Stderr, "sroce devinfo: %v\n", err)
			return exitProblem
		}
		return exitOK
	}
	if dev == "" {
		if dev, err = device.DefaultRouteInterface(); err != nil {
			fmt.Fprintf(e.Stderr, "sroce devinfo: %v\n", err)
			return exitProblem
		}
	}
	if daemonDevinfo(e.Stdout, *socket, dev, *verbose) {
		return exitOK
	}
	if err := devinfo(e.Stdout, dev, m, *verbose); err != nil {
		fmt.Fprintf(e.Stderr, "sroce devinfo: %v\n", err)
		return exitProblem
	}
	return exitOK
}

// listInterfaces prints the interfaces with their state and first address.
func listInterfaces(w io.Writer) error {
	h, err := netif.NewHandle()
	if err != nil {
		return fmt.Errorf("cannot read the network interfaces: %w", err)
	}
	defer h.Close()
	ifs, err := netInterfaces()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d interfaces:\n", len(ifs))
	for _, name := range ifs {
		ifc, err := h.Lookup(name)
		if err != nil {
			continue
		}
		state := "PORT_DOWN"
		if ifc.Active() {
			state = "PORT_ACTIVE"
		}
		addr := "no address"
		if a := ifc.IPv4(); a.IsValid() {
			addr = a.String()
		} else if len(ifc.Addrs) > 0 {
			addr = ifc.Addrs[0].Prefix.Addr().String()
		}
		fmt.Fprintf(w, "    %-16s %-12s mtu %-5d active_mtu %-4d %s\n", name, state, ifc.MTU, ifc.PathMTU(), addr)
	}
	return nil
}

// devinfo opens a port on ifname and prints it as ibv_devinfo does.
func devinfo(w io.Writer, ifname string, mode iface.Mode, verbose bool) error {
	p, err := iface.Open(context.Background(), ifname, iface.Options{Mode: mode, AllowDown: true})
	if errors.Is(err, iface.ErrNoInterface) || errors.Is(err, iface.ErrNotPermitted) {
		return err
	}
	if err != nil {
		// The link could not be opened (busy, no address): describe the
		// interface alone.
		ifc, lerr := netif.Lookup(ifname)
		if lerr != nil {
			return err
		}
		printDevinfo(w, devinfoData{name: "sroce_" + ifc.Name, ifc: ifc, linkErr: err}, verbose)
		return nil
	}
	defer p.Close()
	ifc, err := netif.Lookup(ifname)
	if err != nil {
		return err
	}
	printDevinfo(w, devinfoData{name: p.Device().Name(), ifc: ifc, port: p}, verbose)
	return nil
}

// devinfoData is what printDevinfo prints: an open port, or an interface
// whose link could not be opened.
type devinfoData struct {
	name    string
	ifc     *netif.Interface
	port    *iface.Port
	linkErr error
}

// printDevinfo writes the ibv_devinfo-style description. Values line up
// as ibv_devinfo's do: device fields at column 40, port fields at 48.
func printDevinfo(w io.Writer, d devinfoData, verbose bool) {
	var b strings.Builder
	dev := func(k string, format string, args ...any) { kv(&b, 1, 40, k, fmt.Sprintf(format, args...)) }
	port := func(k string, format string, args ...any) { kv(&b, 3, 48, k, fmt.Sprintf(format, args...)) }
	guid := iface.FormatGUID(iface.NodeGUID(d.ifc.MAC))
	writeDevHead(&b, d.name, guid)
	dev("netdev", "%s (ifindex %d, mtu %d, mac %s)", d.ifc.Name, d.ifc.Index, d.ifc.MTU, d.ifc.MAC)
	if d.port != nil {
		lm := d.port.LinkMode()
		if at := d.port.XDPAttach(); at != "" {
			lm += ", " + at + " attach"
		}
		if a := d.port.LocalAddr(); a.IsValid() {
			lm += fmt.Sprintf(", bound to %v port 4791", a)
		}
		dev("link_mode", "%s", lm)
		dev("link_mode_reason", "%s", d.port.Reason())
		if x := d.port.XDPLink(); x != nil {
			if zc := x.Socket().Stats().ZeroCopyRefusal; zc != "" {
				dev("zero_copy", "no (%s)", zc)
			} else {
				dev("zero_copy", "yes")
			}
		}
	} else {
		dev("link_mode", "unavailable (%v)", d.linkErr)
	}
	if verbose && d.port != nil {
		a := d.port.Device().Query()
		dev("max_mr_size", "0xffffffffffffffff")
		dev("max_qp", "%d", a.MaxQP)
		dev("max_qp_wr", "%d", a.MaxQPWR)
		dev("max_sge", "%d", a.MaxSGE)
		dev("max_cq", "%d", a.MaxCQ)
		dev("max_cqe", "%d", a.MaxCQE)
		dev("max_mr", "%d", a.MaxMR)
		dev("max_pd", "%d", a.MaxPD)
		dev("max_qp_rd_atom", "%d", a.MaxQPRdAtom)
		dev("max_qp_init_rd_atom", "%d", a.MaxQPInitRdAtom)
		dev("max_srq", "%d", a.MaxSRQ)
		dev("max_srq_wr", "%d", a.MaxSRQWR)
		dev("max_inline_data", "%d", a.MaxInlineData)
		dev("max_msg_sz", "0x%x", a.MaxMsgSize)
		dev("atomic_cap", "%s (1)", a.AtomicCapability)
	}
	fmt.Fprintf(&b, "\t\tport:\t1\n")
	state := "PORT_DOWN (1)"
	if d.ifc.Active() && (d.port == nil || d.port.State() == verbs.PortActive) {
		state = "PORT_ACTIVE (4)"
	}
	active := verbs.PortMTU(d.ifc.MTU)
	if d.port != nil {
		active = d.port.ActiveMTU()
	}
	writePortHead(&b, state, verbs.MTU4096, active)
	gids := d.ifc.GIDs
	if d.port != nil {
		gids = d.port.GIDs()
	}
	for _, g := range gids {
		port(fmt.Sprintf("GID[%3d]", g.Index), "%s, %s", netif.FormatGID(g.GID), g.Type)
	}
	if len(gids) == 0 {
		port("GIDs", "none (the interface has no MAC address and no IP address)")
	}
	io.WriteString(w, b.String())
}

// kv writes "key:" after indent tabs and tabs up to column col (tab stops
// every 8 columns, at least one tab), then the value, as ibv_devinfo does.
func kv(b *strings.Builder, indent, col int, key, val string) {
	b.WriteString(strings.Repeat("\t", indent))
	b.WriteString(key)
	b.WriteByte(':')
	pos := indent*8 + len(key) + 1
	for {
		b.WriteByte('\t')
		pos = (pos/8 + 1) * 8
		if pos >= col {
			break
		}
	}
	b.WriteString(val)
	b.WriteByte('\n')
}

// netInterfaces returns the names of the interfaces of the calling
// thread's network namespace.
func netInterfaces() ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("cannot list the network interfaces: %w", err)
	}
	names := make([]string, 0, len(ifs))
	for _, ifc := range ifs {
		names = append(names, ifc.Name)
	}
	return names, nil
}

// daemonDevinfo prints the device the sroce daemon at socket serves on
// ifname, and reports whether there was one.
func daemonDevinfo(w io.Writer, socket, ifname string, verbose bool) bool {
	if socket == "" {
		socket = sockpath.Find()
	}
	x, err := client.Open(socket, "sroce_"+ifname)
	if err != nil {
		return false
	}
	defer x.Close()
	st, err := x.Stats() // the daemon answers a context about its device
	if err != nil {
		return false
	}
	if st.Clients > 0 {
		st.Clients-- // this context
	}
	da, err := x.QueryDevice()
	if err != nil {
		return false
	}
	pa, err := x.QueryPort()
	if err != nil {
		return false
	}
	var b strings.Builder
	dev := func(k string, format string, args ...any) { kv(&b, 1, 40, k, fmt.Sprintf(format, args...)) }
	port := func(k string, format string, args ...any) { kv(&b, 3, 48, k, fmt.Sprintf(format, args...)) }
	var g [8]byte
	binary.LittleEndian.PutUint64(g[:], da.NodeGUID)
	guid := iface.FormatGUID(g)
	writeDevHead(&b, st.Device, guid)
	dev("netdev", "%s (mtu %d)", st.Interface, pa.LinkMTU)
	dev("link_mode", "%s", st.LinkMode)
	dev("daemon", "%s (%d clients)", socket, st.Clients)
	if verbose {
		dev("max_qp", "%d", da.MaxQP)
		dev("max_qp_wr", "%d", da.MaxQPWR)
		dev("max_sge", "%d", da.MaxSGE)
		dev("max_cq", "%d", da.MaxCQ)
		dev("max_cqe", "%d", da.MaxCQE)
		dev("max_mr", "%d", da.MaxMR)
		dev("max_pd", "%d", da.MaxPD)
		dev("max_qp_rd_atom", "%d", da.MaxQPRdAtom)
		dev("max_srq", "%d", da.MaxSRQ)
		dev("max_inline_data", "%d", da.MaxInlineData)
	}
	fmt.Fprintf(&b, "\t\tport:\t1\n")
	state := map[uint32]string{1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE"}[pa.State]
	writePortHead(&b, fmt.Sprintf("%s (%d)", state, pa.State), verbs.MTU(pa.MaxMTU), verbs.MTU(pa.ActiveMTU))
	for i := 0; i < int(pa.GIDTblLen); i++ {
		if gid, err := x.QueryGID(i); err == nil {
			port(fmt.Sprintf("GID[%3d]", i), "%s, RoCE v2", netif.FormatGID(gid))
		}
	}
	io.WriteString(w, b.String())
	return true
}

// writeDevHead writes the lines ibv_devinfo starts a device with, with the
// values an rdma_rxe device has (column 40).
func writeDevHead(b *strings.Builder, name, guid string) {
	dev := func(k, v string) { kv(b, 1, 40, k, v) }
	fmt.Fprintf(b, "hca_id:\t%s\n", name)
	dev("transport", "InfiniBand (0)")
	dev("fw_ver", "0.0.0")
	dev("node_guid", guid)
	dev("sys_image_guid", guid)
	dev("vendor_id", "0xffffff")
	dev("vendor_part_id", "0")
	dev("hw_ver", "0x0")
	dev("phys_port_cnt", "1")
}

// writePortHead writes port 1's state, MTUs, LID fields and link layer, as
// ibv_devinfo does (column 48).
func writePortHead(b *strings.Builder, state string, max, active verbs.MTU) {
	port := func(k, v string) { kv(b, 3, 48, k, v) }
	port("state", state)
	port("max_mtu", fmt.Sprintf("%s (%d)", max, max))
	port("active_mtu", fmt.Sprintf("%s (%d)", active, active))
	port("sm_lid", "0")
	port("port_lid", "0")
	port("port_lmc", "0x00")
	port("link_layer", "Ethernet")
}
