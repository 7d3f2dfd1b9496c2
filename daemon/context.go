package daemon

// The context's requests: HELLO, LIST_DEVICES, OPEN (the connection
// becomes a device context) and the queries of the device, its port, GIDs
// and P_Keys and its counters (QUERY_STATS).

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

func init() {
	register(
		method{op: ctl.OpHello, run: decoded(hello)},
		method{op: ctl.OpListDevices, run: plain(listDevices)},
		method{op: ctl.OpOpen, run: decoded((*conn).open)},
		method{op: ctl.OpQueryStats, run: decoded(queryStats)},
		method{op: ctl.OpQueryDevice, open: true, run: plain((*conn).queryDevice)},
		method{op: ctl.OpQueryPort, open: true, run: decoded((*conn).queryPort)},
		method{op: ctl.OpQueryGID, open: true, run: decoded((*conn).queryGID)},
		method{op: ctl.OpQueryPKey, open: true, run: decoded(queryPKey)},
	)
}

func hello(c *conn, in *ctl.Hello, _ *request) ([]byte, []int, error) {
	if in.ABI != ctl.Version {
		return nil, nil, unix.EPROTO
	}
	out := ctl.Hello{ABI: ctl.Version, NDevices: uint32(len(c.s.devices()))}
	copy(out.Version[:len(out.Version)-1], Version)
	return ctl.Bytes(&out), nil, nil
}

func listDevices(c *conn) ([]byte, []int, error) {
	devs := c.s.devices()
	n := len(devs)
	if max := (ctl.MaxMsg - ctl.HdrSize - 8) / int(unsafe.Sizeof(ctl.Device{})); n > max {
		n = max
	}
	hd := ctl.Devices{Count: uint32(n)}
	out := append([]byte(nil), ctl.Bytes(&hd)...)
	for _, d := range devs[:n] {
		e := deviceOf(d)
		out = append(out, ctl.Bytes(&e)...)
	}
	return out, nil, nil
}

// deviceOf describes a served device as LIST_DEVICES and OPEN give it.
func deviceOf(d *served) ctl.Device {
	var e ctl.Device
	ctl.SetName(e.Name[:], d.name)
	ctl.SetName(e.IfName[:], d.dev.Ifname())
	g := d.dev.NodeGUID()
	e.NodeGUID = *(*uint64)(unsafe.Pointer(&g))
	e.IfIndex = uint32(d.dev.Ifindex())
	return e
}

func queryStats(c *conn, in *ctl.Open, _ *request) ([]byte, []int, error) {
	if c.dev == nil {
		// A context's device only, as a uverbs method before
		// GET_CONTEXT fails (ib_uverbs_get_ucontext_file: EINVAL);
		// the client stays connected and may OPEN.
		return nil, nil, unix.EINVAL
	}
	return c.s.stats(c.dev, ctl.Name(in.Name[:]))
}

func queryPKey(c *conn, in *ctl.Port, _ *request) ([]byte, []int, error) {
	if in.PortNum != 1 || in.Index != 0 {
		return nil, nil, unix.EINVAL
	}
	out := ctl.PKey{PKey: 0xffff}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) open(in *ctl.Open, _ *request) ([]byte, []int, error) {
	if c.dev != nil {
		return nil, nil, misbehaved("OPEN twice on one connection")
	}
	name := ctl.Name(in.Name[:])
	var sd *served
	for _, d := range c.s.devices() {
		if d.name == name {
			sd = d
		}
	}
	if sd == nil {
		return nil, nil, unix.ENODEV
	}
	// The context page, the doorbell and the daemon's end of the async
	// socket; the reply's copies for the client are closed when sent.
	k := add(shmCost(ctl.CtxPageSize), one(ResFDs, 2))
	if err := c.charge(k); err != nil {
		return nil, nil, err
	}
	fail := func(err error, fds ...int) ([]byte, []int, error) {
		closeFDs(fds)
		c.release(k)
		return nil, nil, err
	}
	page, err := newShm("ctx", ctl.CtxPageSize)
	if err != nil {
		return fail(err)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		page.close()
		return fail(fmt.Errorf("eventfd for the doorbell: %w", err))
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		page.close()
		return fail(fmt.Errorf("socketpair for async events: %w", err), efd)
	}
	// The reply passes the client's copies: its async socket end, the
	// eventfd and the context page (dup'd, as the caller closes what it
	// passes).
	dbl, err := dupFD(efd)
	if err != nil {
		page.close()
		return fail(err, efd, pair[0], pair[1])
	}
	pg, err := dupFD(page.fd)
	if err != nil {
		page.close()
		return fail(err, efd, pair[0], pair[1], dbl)
	}
	unix.SetNonblock(pair[0], true)
	// c.dev is read by other goroutines under s.mu (stats, Remove,
	// asyncEvents) or c.ctxMu (stat, QUERY_RES): it is written under both.
	c.s.mu.Lock()
	c.ctxMu.Lock()
	c.dev = sd
	c.ctxPage, c.asyncW = page, pair[0] // asyncEvent reads asyncW under ctxMu
	c.ctxMu.Unlock()
	c.s.mu.Unlock()
	c.doorbell, c.doorbellFD = os.NewFile(uintptr(efd), "sroce-doorbell"), efd
	c.doorbellRC, _ = c.doorbell.SyscallConn() // fails only on a closed file
	c.openCost = k
	c.br = newBridge(c)
	dev := deviceOf(sd)
	c.s.log.Info("client opened device", "client", c.id, "pid", c.pid, "comm", c.comm, "device", c.dev.name)
	return ctl.Bytes(&dev), []int{pair[1], dbl, pg}, nil
}

func (c *conn) queryDevice() ([]byte, []int, error) {
	a := c.dev.dev.Device().Query()
	g := c.dev.dev.NodeGUID()
	guid := *(*uint64)(unsafe.Pointer(&g))
	out := ctl.DeviceAttr{NodeGUID: guid, SysImageGUID: guid, MaxMRSize: ^uint64(0), PageSizeCap: 0xfffff000,
		VendorID: 0xffffff, MaxQP: uint32(a.MaxQP), MaxQPWR: uint32(a.MaxQPWR),
		// rxe's: BAD_PKEY_CNTR, CHANGE_PHY_PORT, AUTO_PATH_MIG, UD_AV_PORT_ENFORCE,
		// PORT_ACTIVE_EVENT, SYS_IMAGE_GUID, RC_RNR_NAK_GEN, SRQ_RESIZE,
		// MEM_WINDOW, MEM_MGT_EXTENSIONS, MEM_WINDOW_TYPE_2B (as ibv_devinfo -v shows it).
		// Not XRC (1<<20), although the XRC verbs work: libfabric's verbs
		// provider takes the bit as a promise of XRC connections over RDMA
		// CM, which sroce's CM does not make, and Open MPI over it then
		// waits for them for ever.
		DeviceCapFlags: 1<<1 | 1<<5 | 1<<6 | 1<<9 | 1<<10 | 1<<11 | 1<<12 | 1<<13 | 1<<17 | 1<<21 | 1<<24,
		MaxSGE:         uint32(a.MaxSGE), MaxSGERd: uint32(a.MaxSGE), MaxCQ: uint32(a.MaxCQ), MaxCQE: uint32(a.MaxCQE),
		MaxMR: uint32(a.MaxMR), MaxPD: uint32(a.MaxPD), MaxQPRdAtom: uint32(a.MaxQPRdAtom),
		MaxResRdAtom: uint32(a.MaxQPRdAtom) * uint32(a.MaxQP), MaxQPInitRdAtom: uint32(a.MaxQPInitRdAtom),
		AtomicCap: 1, MaxMW: uint32(a.MaxMR), MaxAH: uint32(a.MaxQP), MaxSRQ: uint32(a.MaxSRQ),
		MaxSRQWR: uint32(a.MaxSRQWR), MaxSRQSGE: uint32(a.MaxSGE), MaxPKeys: 64, LocalCAAckDelay: 15,
		PhysPortCnt: 1, MaxInlineData: uint32(a.MaxInlineData), MaxMcastGrp: uint32(a.MaxMcastGrp),
		MaxMcastQPAttach: uint32(a.MaxMcastQPAttach), MaxTotalMcastQPAttach: uint32(a.MaxTotalMcastQPAttach)}
	ctl.SetName(out.FWVer[:], "0.0.0")
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) queryPort(in *ctl.Port, _ *request) ([]byte, []int, error) {
	if in.PortNum != 1 {
		return nil, nil, unix.EINVAL
	}
	d := c.dev.dev
	pa := d.Device().QueryPort()
	state := uint32(d.State())
	phys := uint8(3) // disabled
	if d.State() == verbs.PortActive {
		phys = 5 // link up
	}
	out := ctl.PortAttr{State: state, MaxMTU: uint32(pa.MaxMTU), ActiveMTU: uint32(d.ActiveMTU()),
		GIDTblLen: int32(pa.GIDTblLen), PortCapFlags: 1<<16 | 1<<26 | 1<<27, // CM_SUP, IP_BASED_GIDS, ...
		MaxMsgSz: 0x80000000, PKeyTblLen: uint16(pa.PKeyTblLen), MaxVLNum: 1, ActiveWidth: 2, // 4X
		ActiveSpeed: 32, PhysState: phys, LinkLayer: 2 /* Ethernet */, LinkMTU: uint32(d.MTU())}
	return ctl.Bytes(&out), nil, nil
}

func (c *conn) queryGID(in *ctl.Port, _ *request) ([]byte, []int, error) {
	if in.PortNum != 1 {
		return nil, nil, unix.EINVAL
	}
	g, err := c.dev.dev.Device().QueryGID(int(in.Index))
	if err != nil {
		return nil, nil, err
	}
	if g == (bth.GID{}) {
		return nil, nil, unix.ENODATA
	}
	out := ctl.GID{GID: g, GIDType: 1, NdevIfIndex: uint32(c.dev.dev.Ifindex())}
	return ctl.Bytes(&out), nil, nil
}
