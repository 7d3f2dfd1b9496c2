// Package bpf holds the XDP steering program of sroce: a small eBPF program,
// assembled in Go with github.com/cilium/ebpf/asm (no C compiler needed),
// that sends RoCEv2 frames (UDP destination port 4791) arriving on a NIC
// queue to the AF_XDP socket bound to that queue and leaves every other frame
// to the kernel network stack.
//
// Pipeline position: NIC queue -> this program -> XSKMAP[rx_queue_index] ->
// AF_XDP socket (package xdp) -> engine. Frames the program does not claim,
// and RoCEv2 frames arriving on a queue that has no socket in the map, get
// XDP_PASS and continue into the kernel as if no program were attached.
//
// Ownership: a Program owns its eBPF program and XSKMAP file descriptors; a
// Steering owns a Program plus the BPF link that attaches it to one
// interface. Closing the link detaches the program; the kernel also detaches
// it when the process exits.
package bpf

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// RoCEv2Port is the UDP destination port that marks a RoCEv2 packet.
const RoCEv2Port = 4791

// EtherType values the program recognises.
const (
	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86dd
	etherTypeVLAN   = 0x8100 // IEEE 802.1Q customer tag
	etherTypeQinQ   = 0x88a8 // IEEE 802.1ad service tag
	ipProtoUDP      = 17
	ethHeaderLen    = 14
	vlanTagLen      = 4
	ipv4MinHdrLen   = 20
	ipv6HeaderLen   = 40
	udpHeaderLen    = 8
	ipv4FragMask    = 0x3fff // MF flag and fragment offset
	xdpPass         = 2
	ctxData         = 0  // offsetof(struct xdp_md, data)
	ctxDataEnd      = 4  // offsetof(struct xdp_md, data_end)
	ctxRxQueueIndex = 16 // offsetof(struct xdp_md, rx_queue_index)
)

// XDP verdicts as returned by the program (enum xdp_action).
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTx       = 3
	XDPRedirect = 4
)

// AttachMode selects how the program is attached to an interface.
type AttachMode int

const (
	// AttachAuto tries driver (native) mode first and falls back to generic
	// mode if the driver refuses.
	AttachAuto AttachMode = iota
	// AttachDriver attaches in the driver's receive path (native XDP).
	AttachDriver
	// AttachGeneric attaches in the generic (SKB) path, which works on every
	// device but costs an skb allocation per frame.
	AttachGeneric
)

// String returns "auto", "driver" or "generic".
func (m AttachMode) String() string {
	switch m {
	case AttachAuto:
		return "auto"
	case AttachDriver:
		return "driver"
	case AttachGeneric:
		return "generic"
	}
	return fmt.Sprintf("AttachMode(%d)", int(m))
}

// Instructions returns the steering program for an XSKMAP with the given
// file descriptor. Frames are parsed as:
//
//	Ethernet [one 802.1Q (0x8100) or 802.1ad (0x88a8) tag]
//	  IPv4 (any IHL >= 5, not a fragment) or IPv6 (next header UDP)
//	    UDP destination port 4791  -> bpf_redirect_map(xsks, rx_queue_index, XDP_PASS)
//	everything else                -> XDP_PASS
//
// Every IPv4 fragment passes, the first one too: the rest of the datagram
// has no UDP header and goes to the kernel, so the kernel gets all of it and
// can reassemble it. Every packet access is preceded by a bounds check
// against data_end, as the verifier requires.
func Instructions(xsksMapFD int) asm.Instructions {
	const (
		ctx   = asm.R6 // struct xdp_md *
		data  = asm.R2 // packet start
		end   = asm.R3 // data_end
		l3    = asm.R4 // cursor: network header, later UDP header
		etype = asm.R5 // EtherType, later IPv4 header length
		tmp   = asm.R0
	)
	return asm.Instructions{
		asm.Mov.Reg(ctx, asm.R1),
		asm.LoadMem(data, ctx, ctxData, asm.Word),
		asm.LoadMem(end, ctx, ctxDataEnd, asm.Word),

		// Ethernet header.
		asm.Mov.Reg(l3, data),
		asm.Add.Imm(l3, ethHeaderLen),
		asm.JGT.Reg(l3, end, "pass"),
		asm.LoadMem(etype, data, 12, asm.Half),
		asm.HostTo(asm.BE, etype, asm.Half),
		asm.JEq.Imm(etype, etherTypeVLAN, "vlan"),
		asm.JEq.Imm(etype, etherTypeQinQ, "vlan"),
		asm.Ja.Label("l3"),

		// One VLAN tag: TCI (2 bytes) then the inner EtherType.
		asm.Mov.Reg(tmp, l3).WithSymbol("vlan"),
		asm.Add.Imm(tmp, vlanTagLen),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(etype, l3, 2, asm.Half),
		asm.HostTo(asm.BE, etype, asm.Half),
		asm.Add.Imm(l3, vlanTagLen),

		asm.JEq.Imm(etype, etherTypeIPv4, "ipv4").WithSymbol("l3"),
		asm.JEq.Imm(etype, etherTypeIPv6, "ipv6"),
		asm.Ja.Label("pass"),

		// IPv4: version 4, IHL >= 5, protocol UDP, not a fragment.
		asm.Mov.Reg(tmp, l3).WithSymbol("ipv4"),
		asm.Add.Imm(tmp, ipv4MinHdrLen),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(etype, l3, 0, asm.Byte),
		asm.Mov.Reg(tmp, etype),
		asm.RSh.Imm(tmp, 4),
		asm.JNE.Imm(tmp, 4, "pass"),
		asm.And.Imm(etype, 0x0f),
		asm.LSh.Imm(etype, 2),
		asm.JLT.Imm(etype, ipv4MinHdrLen, "pass"),
		asm.LoadMem(tmp, l3, 9, asm.Byte),
		asm.JNE.Imm(tmp, ipProtoUDP, "pass"),
		asm.LoadMem(tmp, l3, 6, asm.Half),
		asm.HostTo(asm.BE, tmp, asm.Half),
		asm.And.Imm(tmp, ipv4FragMask),
		asm.JNE.Imm(tmp, 0, "pass"),
		asm.Add.Reg(l3, etype),
		asm.Ja.Label("udp"),

		// IPv6: version 6, next header UDP (no extension headers).
		asm.Mov.Reg(tmp, l3).WithSymbol("ipv6"),
		asm.Add.Imm(tmp, ipv6HeaderLen),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(tmp, l3, 0, asm.Byte),
		asm.RSh.Imm(tmp, 4),
		asm.JNE.Imm(tmp, 6, "pass"),
		asm.LoadMem(tmp, l3, 6, asm.Byte),
		asm.JNE.Imm(tmp, ipProtoUDP, "pass"),
		asm.Add.Imm(l3, ipv6HeaderLen),

		// UDP destination port.
		asm.Mov.Reg(tmp, l3).WithSymbol("udp"),
		asm.Add.Imm(tmp, udpHeaderLen),
		asm.JGT.Reg(tmp, end, "pass"),
		asm.LoadMem(tmp, l3, 2, asm.Half),
		asm.HostTo(asm.BE, tmp, asm.Half),
		asm.JNE.Imm(tmp, RoCEv2Port, "pass"),

		// return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
		asm.LoadMapPtr(asm.R1, xsksMapFD),
		asm.LoadMem(asm.R2, ctx, ctxRxQueueIndex, asm.Word),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// Program is the loaded steering program and its XSKMAP. It is not attached
// to any interface; see Attach.
type Program struct {
	prog  *ebpf.Program
	xsks  *ebpf.Map
	frags bool
}

// LoadOptions tune Load.
type LoadOptions struct {
	// Queues is the number of XSKMAP slots, one per receive queue. Zero
	// means one.
	Queues int
	// NoFrags loads the program without BPF_F_XDP_HAS_FRAGS. By default
	// the flag is set when the kernel accepts it, which lets the program
	// attach in driver mode to devices whose MTU exceeds one page (veth
	// refuses native XDP above MTU 3506 otherwise).
	NoFrags bool
}

// Load creates the XSKMAP and loads the steering program into the kernel.
// It needs CAP_BPF and CAP_NET_ADMIN (or root).
func Load(opts LoadOptions) (*Program, error) {
	queues := opts.Queues
	if queues <= 0 {
		queues = 1
	}
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "xsks_map",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, fmt.Errorf("bpf: create XSKMAP: %w", err)
	}
	spec := &ebpf.ProgramSpec{
		Name:         "sroce_steer",
		Type:         ebpf.XDP,
		License:      "Dual MIT/GPL",
		Instructions: Instructions(xsks.FD()),
	}
	frags := !opts.NoFrags
	if frags {
		spec.Flags = unix.BPF_F_XDP_HAS_FRAGS
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil && frags {
		// Kernels before 5.18 reject the flag: load a plain program.
		spec.Flags = 0
		frags = false
		prog, err = ebpf.NewProgram(spec)
	}
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("bpf: load steering program: %w", err)
	}
	return &Program{prog: prog, xsks: xsks, frags: frags}, nil
}

// XDP returns the loaded eBPF program (for BPF_PROG_RUN tests and for
// attaching by other means).
func (p *Program) XDP() *ebpf.Program { return p.prog }

// XSKMap returns the map from receive queue index to AF_XDP socket.
func (p *Program) XSKMap() *ebpf.Map { return p.xsks }

// HasFrags reports whether the program was loaded with BPF_F_XDP_HAS_FRAGS
// (multi-buffer aware).
func (p *Program) HasFrags() bool { return p.frags }

// Queues returns the number of XSKMAP slots.
func (p *Program) Queues() int { return int(p.xsks.MaxEntries()) }

// Register steers RoCEv2 frames arriving on queue to the AF_XDP socket fd.
// The socket must be bound to that queue of the interface the program is
// attached to, or the kernel drops the frames it redirects.
func (p *Program) Register(queue, fd int) error {
	if queue < 0 || queue >= p.Queues() {
		return fmt.Errorf("bpf: queue %d outside XSKMAP of %d entries", queue, p.Queues())
	}
	if err := p.xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("bpf: register socket for queue %d: %w", queue, err)
	}
	return nil
}

// Unregister removes the socket of queue from the XSKMAP, so RoCEv2 frames
// on that queue go to the kernel again. Removing an empty slot is not an
// error.
func (p *Program) Unregister(queue int) error {
	err := p.xsks.Delete(uint32(queue))
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("bpf: unregister queue %d: %w", queue, err)
	}
	return nil
}

// Close releases the program and the map. A program still attached stays
// attached until its link is closed.
func (p *Program) Close() error {
	return errors.Join(p.prog.Close(), p.xsks.Close())
}

// Options tune Attach.
type Options struct {
	// Queues is the number of XSKMAP slots; zero means one.
	Queues int
	// Mode is the attach mode; the zero value tries driver mode, then
	// generic mode.
	Mode AttachMode
	// NoFrags: see LoadOptions.
	NoFrags bool
}

// Steering is a steering Program attached to one interface through a BPF
// link.
type Steering struct {
	*Program
	link    link.Link
	mode    AttachMode
	ifindex int
}

// Attach loads the steering program and attaches it to the interface named
// ifname, which is looked up in the calling thread's network namespace.
func Attach(ifname string, opts Options) (*Steering, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("bpf: %w", err)
	}
	return AttachIndex(ifi.Index, opts)
}

// AttachIndex is Attach for an interface index.
func AttachIndex(ifindex int, opts Options) (*Steering, error) {
	p, err := Load(LoadOptions{Queues: opts.Queues, NoFrags: opts.NoFrags})
	if err != nil {
		return nil, err
	}
	s, err := p.Attach(ifindex, opts.Mode)
	if err != nil {
		p.Close()
		return nil, err
	}
	return s, nil
}

// Attach attaches p to the interface ifindex. The returned Steering owns p:
// closing it detaches and closes the program.
func (p *Program) Attach(ifindex int, mode AttachMode) (*Steering, error) {
	try := func(m AttachMode) (link.Link, error) {
		flags := link.XDPDriverMode
		if m == AttachGeneric {
			flags = link.XDPGenericMode
		}
		return link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: flags})
	}
	var (
		l   link.Link
		err error
		got = mode
	)
	switch mode {
	case AttachDriver, AttachGeneric:
		l, err = try(mode)
	case AttachAuto:
		l, err = try(AttachDriver)
		got = AttachDriver
		if err != nil {
			var err2 error
			l, err2 = try(AttachGeneric)
			got = AttachGeneric
			if err2 != nil {
				err = fmt.Errorf("driver mode: %w; generic mode: %w", err, err2)
			} else {
				err = nil
			}
		}
	default:
		return nil, fmt.Errorf("bpf: unknown attach mode %d", int(mode))
	}
	if err != nil {
		return nil, fmt.Errorf("bpf: attach XDP to ifindex %d: %w", ifindex, err)
	}
	return &Steering{Program: p, link: l, mode: got, ifindex: ifindex}, nil
}

// Mode returns the mode the program is attached in (driver or generic).
func (s *Steering) Mode() AttachMode { return s.mode }

// Ifindex returns the index of the interface the program is attached to.
func (s *Steering) Ifindex() int { return s.ifindex }

// Close detaches the program and releases it and its map.
func (s *Steering) Close() error {
	return errors.Join(s.link.Close(), s.Program.Close())
}
