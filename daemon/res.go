package daemon

// QUERY_RES: the daemon's objects by kind and owner, for "sroce resource"
// (what "rdma resource show" gives for a kernel device). Any connection
// may ask, before or after OPEN, about every context: who holds what is
// visible to every local user, as the kernel's rdma tool shows it, but
// keys and addresses only to their owner's uid, root and the daemon's own
// uid; a viewer in a PID namespace of its own sees only the processes of
// that namespace, as the kernel scopes its resource dumps. A reply is one
// page, as large as fits in a datagram; the cursor (context number,
// handle) walks the rest.

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

func init() {
	register(method{op: ctl.OpQueryRes, run: decoded(queryRes)})
}

func queryRes(c *conn, in *ctl.ResQuery, _ *request) ([]byte, []int, error) {
	return c.s.queryRes(c, in)
}

// resObject is one object of a listing, with its place in the order:
// its value v, or fill, which reads the engine's or the CM's state for it
// (after the table's lock is released) when it is listed.
type resObject struct {
	handle uint32
	v      any
	fill   func() any
}

// resPageRoom is the room for the objects of a page: a datagram less the
// header and the page's own fields.
const resPageRoom = ctl.MaxMsg - ctl.HdrSize - 128

// queryRes answers QUERY_RES of connection asker (which is not listed).
//
// What it costs the others is bounded: it reads each listed connection's
// tables under their kinds' locks for reading, one table at a time (a
// bridge reads them too, and is never kept waiting by a listing), and one
// listing at a time walks the tables (s.resMu), so that a flood of them
// from one user takes one goroutine's time of the daemon's.
func (s *Server) queryRes(asker *conn, in *ctl.ResQuery) ([]byte, []int, error) {
	if in.Kind < ctl.ResKindClients || in.Kind > ctl.ResKindCMID {
		return nil, nil, unix.EINVAL
	}
	viewer := asker.uid
	privileged := viewer == 0 || viewer == uint32(os.Geteuid())
	// A viewer in a PID namespace of its own (a container) sees, as with
	// the kernel's rdma tool, only the objects of processes in its
	// namespace, under the pids it knows them by.
	viewerNS := pidNS(asker.pid)
	scoped := viewerNS != 0 && viewerNS != pidNS(int32(os.Getpid()))
	s.resMu.Lock()
	defer s.resMu.Unlock()
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		if c.id >= in.AfterCtx && c != asker {
			cs = append(cs, c)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(cs, func(a, b *conn) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	page := ctl.ResPage{Items: []ctl.RawJSON{}}
	room := resPageRoom
	devs := s.devices()
	for _, c := range cs {
		pid := c.pid
		if scoped {
			if pidNS(c.pid) != viewerNS {
				continue
			}
			if pid = innerPID(c.pid); pid == 0 {
				continue
			}
		}
		objs := c.resObjects(in.Kind, privileged || viewer == c.uid, pid, devs)
		for _, o := range objs {
			if c.id == in.AfterCtx && o.handle <= in.AfterHandle {
				continue
			}
			v := o.v
			if o.fill != nil {
				v = o.fill()
			}
			enc, err := json.Marshal(v)
			if err != nil {
				return nil, nil, unix.EOVERFLOW
			}
			if len(enc)+1 > room {
				page.More = true
				return marshalPage(&page)
			}
			room -= len(enc) + 1
			page.Items = append(page.Items, enc)
			page.NextCtx, page.NextHandle = c.id, o.handle
		}
	}
	return marshalPage(&page)
}

func marshalPage(p *ctl.ResPage) ([]byte, []int, error) {
	b, err := json.Marshal(p)
	if err != nil || len(b) > ctl.MaxMsg-ctl.HdrSize {
		return nil, nil, unix.EOVERFLOW
	}
	return b, nil, nil
}

// resObjects lists the connection's objects of kind rk, by handle; full
// says the viewer may see keys and addresses. Each table is read under
// its kind's lock for reading, one at a time (a count of one table and a
// listing of another may be a request apart); the engine's and the CM's
// state (which take their own locks) is read after, as queryQP does, and
// only for the objects a page lists. pid is the owner's pid as the viewer
// knows it.
func (c *conn) resObjects(rk ctl.ResKind, full bool, pid int32, devs []*served) []resObject {
	own := ctl.ResOwner{Ctx: c.id, PID: pid, UID: c.uid, Comm: c.comm}
	c.ctxMu.Lock()
	if c.dev != nil {
		own.Dev = c.dev.name
	}
	c.ctxMu.Unlock()
	// read runs f under kind k's lock, for reading.
	read := func(k kind, f func()) {
		mu := c.kindLock(k)
		mu.RLock()
		defer mu.RUnlock()
		f()
	}
	var out []resObject
	switch rk {
	case ctl.ResKindClients:
		r := ctl.ResClient{ResOwner: own}
		read(kindPD, func() { r.PDs = len(c.pds) })
		read(kindCQ, func() { r.CQs = len(c.cqs) })
		read(kindSRQ, func() { r.SRQs = len(c.srqs) })
		read(kindQP, func() { r.QPs = len(c.qps) })
		read(kindAH, func() { r.AHs = len(c.ahs) })
		read(kindMR, func() { r.MRs, r.MWs, r.RegBytes = len(c.mrs), len(c.mws), c.regBytes })
		read(kindCM, func() { r.CMIDs = len(c.cm.ids) })
		out = append(out, resObject{v: r})
	case ctl.ResKindPD:
		users := map[uint32]int{}
		pdOf := c.pdHandles()
		read(kindSRQ, func() {
			for _, o := range c.srqs {
				users[o.pd]++
			}
		})
		read(kindQP, func() {
			for _, o := range c.qps {
				users[o.pd]++
			}
		})
		read(kindAH, func() {
			for _, o := range c.ahs {
				users[o.pd]++
			}
		})
		read(kindMR, func() {
			for _, o := range c.mrs {
				if h, ok := pdOf[o.mr.PD()]; ok {
					users[h]++
				}
			}
		})
		for _, h := range pdOf {
			out = append(out, resObject{handle: h, v: ctl.ResPD{ResOwner: own, PDN: h, Users: users[h]}})
		}
	case ctl.ResKindMR:
		pdOf := c.pdHandles()
		read(kindMR, func() {
			for h, o := range c.mrs {
				r := ctl.ResMR{ResOwner: own, MRN: h, PDN: pdOf[o.mr.PD()], Length: uint64(o.mr.Len()), Access: mr.Access(o.access).String()}
				if full {
					lk, rk, iova := o.mr.LKey(), o.mr.RKey(), o.mr.Addr()
					r.LKey, r.RKey, r.IOVA = &lk, &rk, &iova
				}
				out = append(out, resObject{handle: h, v: r})
			}
		})
	case ctl.ResKindCQ:
		users := map[uint32]int{}
		read(kindQP, func() {
			for _, o := range c.qps {
				users[o.cqs[0]]++
				if o.cqs[1] != o.cqs[0] {
					users[o.cqs[1]]++
				}
			}
		})
		read(kindCQ, func() {
			for h, o := range c.cqs {
				r, cq := ctl.ResCQ{ResOwner: own, CQN: h, Users: users[h], Channel: o.ch != 0}, o.cq
				out = append(out, resObject{handle: h, fill: func() any {
					if cq != nil {
						r.CQE = cq.Cqe()
					}
					return r
				}})
			}
		})
	case ctl.ResKindQP:
		read(kindQP, func() {
			for h, o := range c.qps {
				r := ctl.ResQP{ResOwner: own, Port: 1, LQPN: uint32(o.qp.QPN()), Type: o.typ.String(),
					PDN: o.pd, SendCQN: o.cqs[0], RecvCQN: o.cqs[1], SRQN: o.srq, Handle: h}
				q := o.qp
				out = append(out, resObject{handle: h, fill: func() any {
					a, _ := q.Query()
					r.RQPN, r.State, r.SQPSN, r.RQPSN = uint32(a.DestQPN), a.State.String(), uint32(a.SQPSN), uint32(a.RQPSN)
					r.PathMTU = pathMTU(a.PathMTU)
					return r
				}})
			}
		})
	case ctl.ResKindSRQ:
		users := map[uint32]int{}
		read(kindQP, func() {
			for _, o := range c.qps {
				if o.srq != 0 {
					users[o.srq]++
				}
			}
		})
		read(kindSRQ, func() {
			for h, o := range c.srqs {
				r := ctl.ResSRQ{ResOwner: own, SRQN: h, Type: "BASIC", MaxSGE: o.maxSGE, PDN: o.pd, Users: users[h]}
				if o.xrcd != 0 {
					r.Type = "XRC"
				}
				srq := o.srq
				out = append(out, resObject{handle: h, fill: func() any {
					r.MaxWR, r.Limit, _ = srq.Query()
					return r
				}})
			}
		})
	case ctl.ResKindCMID:
		read(kindCM, func() {
			for h, o := range c.cm.ids {
				out = append(out, resObject{handle: h, fill: cmIDRes(own, h, o.id, devs)})
			}
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].handle < out[j].handle })
	return out
}

// pdHandles returns the handles of the connection's PDs, by PD.
func (c *conn) pdHandles() map[*roce.PD]uint32 {
	c.pdMu.RLock()
	defer c.pdMu.RUnlock()
	pdOf := make(map[*roce.PD]uint32, len(c.pds))
	for h, pd := range c.pds {
		pdOf[pd] = h
	}
	return pdOf
}

// cmIDRes returns the fill of CM ID h (id) of a listing.
func cmIDRes(own ctl.ResOwner, h uint32, id *rdmacm.ID, devs []*served) func() any {
	r := ctl.ResCMID{ResOwner: own, ID: h}
	return func() any {
		r.LQPN, r.State, r.PS = uint32(id.QPNum()), id.State(), id.PortSpace().String()
		switch id.PortSpace() {
		case cm.PortSpaceTCP:
			r.QPType = verbs.QPTypeRC.String()
		case cm.PortSpaceUDP:
			r.QPType = verbs.QPTypeUD.String()
		}
		// An ID is on the device its address resolved to, which may not
		// be the one its context opened.
		if dev := id.Device(); dev != nil {
			r.Port = 1
			for _, sd := range devs {
				if sd.dev.Device() == dev {
					r.ResOwner.Dev = sd.name
				}
			}
		}
		if a := id.LocalAddr(); a.IsValid() {
			r.SrcAddr = a.String()
		}
		if a := id.PeerAddr(); a.IsValid() {
			r.DstAddr = a.String()
		}
		return r
	}
}

// pathMTU is an MTU enum's bytes, 0 when unset.
func pathMTU(m verbs.MTU) int {
	if m == 0 {
		return 0
	}
	return m.Bytes()
}

// pidNS returns the inode of process pid's PID namespace, 0 when it
// cannot be read (the process is gone).
func pidNS(pid int32) uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/"+strconv.Itoa(int(pid))+"/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// innerPID returns process pid's number in its own (innermost) PID
// namespace: the last of /proc/PID/status's NSpid; 0 when unknown.
func innerPID(pid int32) int32 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
			fs := strings.Fields(f)
			if len(fs) == 0 {
				return 0
			}
			n, err := strconv.ParseInt(fs[len(fs)-1], 10, 32)
			if err != nil {
				return 0
			}
			return int32(n)
		}
	}
	return 0
}
