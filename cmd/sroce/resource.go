package main

// sroce resource: the objects a running daemon holds for its clients,
// by kind and owner, as "rdma resource show" lists a kernel device's.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/internal/sockpath"
)

const resourceAbout = `
Resource lists what the running sroce daemon holds for its clients, as
"rdma resource show" does for a kernel RDMA device. Without an object
kind it prints, per device, how many of each kind its clients hold. With
one it prints one line per object, its owner last (pid, program name and
uid of the process whose context holds it):

  clients  the contexts (client connections) and what each holds
  pd       protection domains: the objects in each (users)
  mr       memory regions: length, access flags, lkey, rkey and iova
  cq       completion queues: size (cqe), the QPs using each (users)
  qp       queue pairs: QPN, the peer's QPN, type, state, the next PSN of
           the send queue (sq-psn) and of the receive queue (rq-psn),
           path MTU
  srq      shared receive queues: type, size, limit, the QPs using each
  cm_id    RDMA CM IDs: state, port space, QPN, source and destination

ctxn numbers a context in the daemon; pdn, mrn, cqn and srqn are the
context's own handles of its objects (a QP's pdn, send-cqn, recv-cqn and
srqn name them). Every local user may list every object, as with the
kernel's tool, but the keys and the address of an MR (lkey, rkey, iova)
only its owner's uid, root and the daemon's uid see; others see "-". A
viewer in a PID namespace of its own (a container) sees only the
processes of its namespace, under the pids it knows them by.

--json prints a JSON array: one object per line of the text, with the
same names (dev, ctxn, pid, uid, comm, lqpn, sq_psn, ...); keys a viewer
may not see are left out. The daemon is the one at --socket, or
SROCE_SOCKET, or the daemon's usual place.`

// runResource implements "sroce resource".
func runResource(e *env, args []string) int {
	f := newFlags(e, "resource", "sroce resource [clients|pd|mr|cq|qp|srq|cm_id] [--json] [--socket PATH]", resourceAbout)
	asJSON := f.Bool("json", false, "print a JSON array")
	socket := f.String("socket", "", "the daemon's unix socket `PATH` (default: SROCE_SOCKET, or the place for this user)")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) > 1 {
		return f.usageError("resource takes at most one object kind")
	}
	path := *socket
	if path == "" {
		path = sockpath.Find()
	}
	kind, name := ctl.ResKindClients, ""
	if len(pos) == 1 {
		name = pos[0]
		found := false
		for _, k := range ctl.ResKinds {
			if k.Name == name {
				kind, found = k.Kind, true
			}
		}
		if !found {
			return f.usageError(fmt.Sprintf("unknown object kind %q: want clients, pd, mr, cq, qp, srq or cm_id", name))
		}
	}
	items, err := client.Resources(path, kind)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce resource: %v\n", err)
		return exitProblem
	}
	var rows []resRow
	if name == "" {
		rows, err = resSummary(items, path)
	} else {
		rows, err = resRows(kind, items)
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce resource: %v\n", err)
		return exitProblem
	}
	if *asJSON {
		return printResJSON(e, name == "", rows, items)
	}
	printResRows(e.Stdout, rows)
	return exitOK
}

// resRow is one line of the text: pairs of a name and a value, the same
// names in every row of a listing; obj is its JSON form.
type resRow struct {
	pairs [][2]string
	obj   any
}

// resSummary counts the clients' objects per device, as "rdma resource
// show" does; every device the daemon serves has a line.
func resSummary(items []json.RawMessage, socket string) ([]resRow, error) {
	type counts struct {
		Dev   string `json:"dev"`
		Ctx   int    `json:"ctx"`
		PD    int    `json:"pd"`
		CQ    int    `json:"cq"`
		QP    int    `json:"qp"`
		CMID  int    `json:"cm_id"`
		MR    int    `json:"mr"`
		SRQ   int    `json:"srq"`
		Bytes uint64 `json:"reg_bytes"`
	}
	by := map[string]*counts{}
	if devs, err := client.Devices(socket); err == nil {
		for _, d := range devs {
			by[d.Name] = &counts{Dev: d.Name}
		}
	}
	for _, it := range items {
		var c ctl.ResClient
		if err := json.Unmarshal(it, &c); err != nil {
			return nil, fmt.Errorf("unreadable reply: %w", err)
		}
		if c.Dev == "" {
			continue // a connection that opened no device (CM only, or a query)
		}
		n := by[c.Dev]
		if n == nil {
			n = &counts{Dev: c.Dev}
			by[c.Dev] = n
		}
		n.Ctx++
		n.PD += c.PDs
		n.CQ += c.CQs
		n.QP += c.QPs
		n.CMID += c.CMIDs
		n.MR += c.MRs
		n.SRQ += c.SRQs
		n.Bytes += c.RegBytes
	}
	names := make([]string, 0, len(by))
	for d := range by {
		names = append(names, d)
	}
	sort.Strings(names)
	var rows []resRow
	for _, d := range names {
		n := by[d]
		rows = append(rows, resRow{obj: n, pairs: [][2]string{{"dev", d}, {"pd", itoa(n.PD)}, {"cq", itoa(n.CQ)},
			{"qp", itoa(n.QP)}, {"cm_id", itoa(n.CMID)}, {"mr", itoa(n.MR)}, {"ctx", itoa(n.Ctx)}, {"srq", itoa(n.SRQ)},
			{"reg-bytes", strconv.FormatUint(n.Bytes, 10)}}})
	}
	return rows, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// owner is the owner's pairs, last on every line.
func owner(o ctl.ResOwner) [][2]string {
	return [][2]string{{"ctxn", strconv.FormatUint(o.Ctx, 10)}, {"pid", strconv.Itoa(int(o.PID))}, {"comm", o.Comm},
		{"uid", strconv.FormatUint(uint64(o.UID), 10)}}
}

// dev names an object's device and port ("-" before OPEN).
func devPort(dev string, port int) string {
	switch {
	case dev == "":
		return "-"
	case port == 0:
		return dev
	}
	return dev + "/" + strconv.Itoa(port)
}

// hidden is a key or address the viewer may not see.
func hidden[T uint32 | uint64](v *T, hex bool) string {
	if v == nil {
		return "-"
	}
	if hex {
		return "0x" + strconv.FormatUint(uint64(*v), 16)
	}
	return strconv.FormatUint(uint64(*v), 10)
}

// decode unmarshals every item into a T and makes a row of each.
func decode[T any](items []json.RawMessage, row func(T) [][2]string) ([]resRow, error) {
	rows := make([]resRow, 0, len(items))
	for _, it := range items {
		var v T
		if err := json.Unmarshal(it, &v); err != nil {
			return nil, fmt.Errorf("unreadable reply: %w", err)
		}
		rows = append(rows, resRow{pairs: row(v), obj: v})
	}
	return rows, nil
}

func u32(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// resRows makes the lines of a listing of kind.
func resRows(kind ctl.ResKind, items []json.RawMessage) ([]resRow, error) {
	switch kind {
	case ctl.ResKindClients:
		return decode(items, func(c ctl.ResClient) [][2]string {
			return append([][2]string{{"dev", devPort(c.Dev, 0)}, {"pd", itoa(c.PDs)}, {"mr", itoa(c.MRs)}, {"mw", itoa(c.MWs)},
				{"cq", itoa(c.CQs)}, {"qp", itoa(c.QPs)}, {"srq", itoa(c.SRQs)}, {"ah", itoa(c.AHs)}, {"cm_id", itoa(c.CMIDs)},
				{"reg-bytes", strconv.FormatUint(c.RegBytes, 10)}}, owner(c.ResOwner)...)
		})
	case ctl.ResKindPD:
		return decode(items, func(p ctl.ResPD) [][2]string {
			return append([][2]string{{"dev", devPort(p.Dev, 0)}, {"pdn", u32(p.PDN)}, {"users", itoa(p.Users)}}, owner(p.ResOwner)...)
		})
	case ctl.ResKindMR:
		return decode(items, func(m ctl.ResMR) [][2]string {
			return append([][2]string{{"dev", devPort(m.Dev, 0)}, {"mrn", u32(m.MRN)}, {"pdn", u32(m.PDN)},
				{"mrlen", strconv.FormatUint(m.Length, 10)}, {"access", m.Access}, {"lkey", hidden(m.LKey, true)},
				{"rkey", hidden(m.RKey, true)}, {"iova", hidden(m.IOVA, true)}}, owner(m.ResOwner)...)
		})
	case ctl.ResKindCQ:
		return decode(items, func(c ctl.ResCQ) [][2]string {
			ch := "no"
			if c.Channel {
				ch = "yes"
			}
			return append([][2]string{{"dev", devPort(c.Dev, 0)}, {"cqn", u32(c.CQN)}, {"cqe", itoa(c.CQE)}, {"users", itoa(c.Users)},
				{"comp-channel", ch}}, owner(c.ResOwner)...)
		})
	case ctl.ResKindQP:
		return decode(items, func(q ctl.ResQP) [][2]string {
			srq := "-"
			if q.SRQN != 0 {
				srq = u32(q.SRQN)
			}
			return append([][2]string{{"link", devPort(q.Dev, q.Port)}, {"lqpn", u32(q.LQPN)}, {"rqpn", u32(q.RQPN)},
				{"type", q.Type}, {"state", q.State}, {"rq-psn", u32(q.RQPSN)}, {"sq-psn", u32(q.SQPSN)},
				{"path-mtu", itoa(q.PathMTU)}, {"pdn", u32(q.PDN)}, {"send-cqn", u32(q.SendCQN)}, {"recv-cqn", u32(q.RecvCQN)},
				{"srqn", srq}}, owner(q.ResOwner)...)
		})
	case ctl.ResKindSRQ:
		return decode(items, func(s ctl.ResSRQ) [][2]string {
			return append([][2]string{{"dev", devPort(s.Dev, 0)}, {"srqn", u32(s.SRQN)}, {"type", s.Type}, {"max-wr", u32(s.MaxWR)},
				{"max-sge", u32(s.MaxSGE)}, {"srq-limit", u32(s.Limit)}, {"pdn", u32(s.PDN)}, {"users", itoa(s.Users)}},
				owner(s.ResOwner)...)
		})
	case ctl.ResKindCMID:
		return decode(items, func(c ctl.ResCMID) [][2]string {
			dash := func(s string) string {
				if s == "" {
					return "-"
				}
				return s
			}
			return append([][2]string{{"link", devPort(c.Dev, c.Port)}, {"cm-idn", u32(c.ID)}, {"lqpn", u32(c.LQPN)},
				{"qp-type", dash(c.QPType)}, {"state", c.State}, {"ps", c.PS}, {"src-addr", dash(c.SrcAddr)},
				{"dst-addr", dash(c.DstAddr)}}, owner(c.ResOwner)...)
		})
	}
	return nil, fmt.Errorf("unknown kind %d", kind)
}

// printResRows prints the rows as "name value" pairs, each pair's column
// as wide as its widest value, so the lines line up.
func printResRows(w io.Writer, rows []resRow) {
	var widths []int
	for _, r := range rows {
		for i, p := range r.pairs {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(p[1]))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		for i, p := range r.pairs {
			if i > 0 {
				line.WriteByte(' ')
			}
			val := strings.Map(func(c rune) rune { // a program name is any bytes
				if c < 0x20 || c == 0x7f {
					return '?'
				}
				return c
			}, p[1])
			fmt.Fprintf(&line, "%s %-*s", p[0], widths[i], val)
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}

// printResJSON prints the listing as a JSON array: the daemon's objects
// as they came, or the summary's counts.
func printResJSON(e *env, summary bool, rows []resRow, items []json.RawMessage) int {
	var b []byte
	var err error
	if summary {
		objs := make([]any, len(rows))
		for i, r := range rows {
			objs[i] = r.obj
		}
		b, err = json.Marshal(objs)
	} else {
		if items == nil {
			items = []json.RawMessage{}
		}
		b, err = json.Marshal(items)
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce resource: %v\n", err)
		return exitProblem
	}
	var out bytes.Buffer
	json.Indent(&out, b, "", "  ")
	out.WriteByte('\n')
	e.Stdout.Write(out.Bytes())
	return exitOK
}
