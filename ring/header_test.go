package ring

import (
	"fmt"
	"github.com/sroce/sroce/mr"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// field is one offset or size both languages must agree on.
type field struct {
	c     string // C expression: offsetof(...) or sizeof(...)
	goVal uintptr
}

func layout() []field {
	var h Header
	var e CQE
	var g mr.SGE
	var u UDAddr
	var s SendWQE
	var r RecvWQE
	off := func(typ, member string, v uintptr) field {
		return field{fmt.Sprintf("offsetof(struct %s, %s)", typ, member), v}
	}
	size := func(typ string, v uintptr) field { return field{fmt.Sprintf("sizeof(struct %s)", typ), v} }
	return []field{
		size("sroce_ring_hdr", unsafe.Sizeof(h)),
		off("sroce_ring_hdr", "magic", unsafe.Offsetof(h.Magic)),
		off("sroce_ring_hdr", "version", unsafe.Offsetof(h.Version)),
		off("sroce_ring_hdr", "kind", unsafe.Offsetof(h.Kind)),
		off("sroce_ring_hdr", "size", unsafe.Offsetof(h.Size)),
		off("sroce_ring_hdr", "limit", unsafe.Offsetof(h.Limit)),
		off("sroce_ring_hdr", "stride", unsafe.Offsetof(h.Stride)),
		off("sroce_ring_hdr", "prod", unsafe.Offsetof(h.Prod)),
		off("sroce_ring_hdr", "cons", unsafe.Offsetof(h.Cons)),
		{"SROCE_RING_HDR_SIZE", HeaderSize},
		{"SROCE_RING_MAGIC", Magic},
		{"SROCE_RING_VERSION", Version},
		{"SROCE_RING_CQ", uintptr(KindCQ)},
		{"SROCE_RING_SEND", uintptr(KindSend)},
		{"SROCE_RING_RECV", uintptr(KindRecv)},

		size("sroce_sge", unsafe.Sizeof(g)),
		off("sroce_sge", "addr", unsafe.Offsetof(g.Addr)),
		off("sroce_sge", "length", unsafe.Offsetof(g.Length)),
		off("sroce_sge", "lkey", unsafe.Offsetof(g.LKey)),

		size("sroce_cqe", unsafe.Sizeof(e)),
		off("sroce_cqe", "wr_id", unsafe.Offsetof(e.WRID)),
		off("sroce_cqe", "status", unsafe.Offsetof(e.Status)),
		off("sroce_cqe", "opcode", unsafe.Offsetof(e.Opcode)),
		off("sroce_cqe", "vendor_err", unsafe.Offsetof(e.VendorErr)),
		off("sroce_cqe", "byte_len", unsafe.Offsetof(e.ByteLen)),
		off("sroce_cqe", "imm", unsafe.Offsetof(e.Imm)),
		off("sroce_cqe", "invalidated_rkey", unsafe.Offsetof(e.InvalidatedRKey)),
		off("sroce_cqe", "qp_num", unsafe.Offsetof(e.QPNum)),
		off("sroce_cqe", "src_qp", unsafe.Offsetof(e.SrcQP)),
		off("sroce_cqe", "wc_flags", unsafe.Offsetof(e.Flags)),
		off("sroce_cqe", "pkey_index", unsafe.Offsetof(e.PKeyIndex)),
		off("sroce_cqe", "slid", unsafe.Offsetof(e.SLID)),
		off("sroce_cqe", "sl", unsafe.Offsetof(e.SL)),
		off("sroce_cqe", "dlid_path_bits", unsafe.Offsetof(e.DLIDPathBits)),

		size("sroce_ud_addr", unsafe.Sizeof(u)),
		off("sroce_ud_addr", "dgid", unsafe.Offsetof(u.DGID)),
		off("sroce_ud_addr", "flow_label", unsafe.Offsetof(u.FlowLabel)),
		off("sroce_ud_addr", "remote_qpn", unsafe.Offsetof(u.RemoteQPN)),
		off("sroce_ud_addr", "remote_qkey", unsafe.Offsetof(u.RemoteQKey)),
		off("sroce_ud_addr", "sgid_index", unsafe.Offsetof(u.SGIDIndex)),
		off("sroce_ud_addr", "hop_limit", unsafe.Offsetof(u.HopLimit)),
		off("sroce_ud_addr", "traffic_class", unsafe.Offsetof(u.TrafficClass)),
		off("sroce_ud_addr", "port_num", unsafe.Offsetof(u.PortNum)),
		off("sroce_ud_addr", "dmac", unsafe.Offsetof(u.DMAC)),

		size("sroce_send_wqe", unsafe.Sizeof(s)),
		off("sroce_send_wqe", "wr_id", unsafe.Offsetof(s.WRID)),
		off("sroce_send_wqe", "opcode", unsafe.Offsetof(s.Opcode)),
		off("sroce_send_wqe", "num_sge", unsafe.Offsetof(s.NumSGE)),
		off("sroce_send_wqe", "inline_len", unsafe.Offsetof(s.InlineLen)),
		off("sroce_send_wqe", "send_flags", unsafe.Offsetof(s.Flags)),
		off("sroce_send_wqe", "imm", unsafe.Offsetof(s.Imm)),
		off("sroce_send_wqe", "invalidate_rkey", unsafe.Offsetof(s.InvalidateRKey)),
		off("sroce_send_wqe", "remote_addr", unsafe.Offsetof(s.RemoteAddr)),
		off("sroce_send_wqe", "rkey", unsafe.Offsetof(s.RKey)),
		off("sroce_send_wqe", "length", unsafe.Offsetof(s.Length)),
		off("sroce_send_wqe", "compare_add", unsafe.Offsetof(s.CompareAdd)),
		off("sroce_send_wqe", "swap", unsafe.Offsetof(s.Swap)),
		off("sroce_send_wqe", "bind_addr", unsafe.Offsetof(s.BindAddr)),
		off("sroce_send_wqe", "bind_length", unsafe.Offsetof(s.BindLength)),
		off("sroce_send_wqe", "bind_lkey", unsafe.Offsetof(s.BindLKey)),
		off("sroce_send_wqe", "bind_access", unsafe.Offsetof(s.BindAccess)),
		off("sroce_send_wqe", "reg_access", unsafe.Offsetof(s.RegAccess)),
		off("sroce_send_wqe", "ah", unsafe.Offsetof(s.AH)),
		off("sroce_send_wqe", "ud", unsafe.Offsetof(s.UD)),

		size("sroce_recv_wqe", unsafe.Sizeof(r)),
		off("sroce_recv_wqe", "wr_id", unsafe.Offsetof(r.WRID)),
		off("sroce_recv_wqe", "num_sge", unsafe.Offsetof(r.NumSGE)),
		off("sroce_recv_wqe", "length", unsafe.Offsetof(r.Length)),
	}
}

// compileC builds a C program against sroce_ring.h, skipping the test
// when there is no C compiler.
func compileC(t *testing.T, src string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot check sroce_ring.h against the Go layout")
	}
	inc, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "prog")
	out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", inc, "-o", exe, c).CombinedOutput()
	if err != nil {
		t.Fatalf("compiling against sroce_ring.h: %v\n%s", err, out)
	}
	return exe
}

// TestHeaderLayout compiles a C program that prints every offset and size
// of sroce_ring.h and compares them with the Go structs.
func TestHeaderLayout(t *testing.T) {
	fields := layout()
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include \"sroce_ring.h\"\nint main(void) {\n")
	for _, f := range fields {
		fmt.Fprintf(&b, "\tprintf(\"%%lu\\n\", (unsigned long)(%s));\n", f.c)
	}
	b.WriteString("\treturn 0;\n}\n")
	exe := compileC(t, b.String())
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(fields) {
		t.Fatalf("%d values from C, want %d", len(lines), len(fields))
	}
	for i, f := range fields {
		v, err := strconv.ParseUint(lines[i], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if uintptr(v) != f.goVal {
			t.Errorf("%s: C says %d, Go says %d", f.c, v, f.goVal)
		}
	}
}
