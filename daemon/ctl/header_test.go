package ctl

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// goStructs names the Go struct of every struct of sroce_ctl.h.
var goStructs = map[string]any{
	"sroce_ctl_hdr": Hdr{}, "sroce_ctl_hello": Hello{}, "sroce_ctl_devices": Devices{},
	"sroce_ctl_device": Device{}, "sroce_ctl_open": Open{}, "sroce_ctl_res_query": ResQuery{}, "sroce_ctx_page": CtxPage{},
	"sroce_ctl_device_attr": DeviceAttr{}, "sroce_ctl_port": Port{}, "sroce_ctl_port_attr": PortAttr{},
	"sroce_ctl_gid": GID{}, "sroce_ctl_pkey": PKey{}, "sroce_ctl_handle": Handle{},
	"sroce_ctl_reg_mr": RegMR{}, "sroce_ctl_mcast": Mcast{}, "sroce_ctl_mr": MR{}, "sroce_ctl_mw": MW{}, "sroce_ctl_rereg_mr": ReregMR{},
	"sroce_ctl_resize_cq": ResizeCQ{},
	"sroce_ctl_create_cq": CreateCQ{}, "sroce_ctl_cq": CQ{}, "sroce_cq_ctl": CQCtl{},
	"sroce_ctl_cq_event": CQEvent{}, "sroce_ctl_async_event": AsyncEvent{}, "sroce_ctl_qp_cap": QPCap{},
	"sroce_ctl_create_qp": CreateQP{}, "sroce_ctl_qp": QP{}, "sroce_qp_ctl": QPCtl{},
	"sroce_ctl_ah_attr": AHAttr{}, "sroce_ctl_qp_attr": QPAttr{}, "sroce_ctl_modify_qp": ModifyQP{},
	"sroce_ctl_srq": SRQ{}, "sroce_ctl_open_xrcd": OpenXRCD{}, "sroce_ctl_open_qp": OpenQP{}, "sroce_ctl_srq_created": SRQCreated{}, "sroce_srq_ctl": SRQCtl{},
	"sroce_ctl_ah":      AH{},
	"sroce_ctl_cm_addr": CMAddr{}, "sroce_ctl_cm_create_id": CMCreateID{}, "sroce_ctl_cm_id_arg": CMIDArg{},
	"sroce_ctl_cm_addr_req": CMAddrReq{}, "sroce_ctl_cm_id_info": CMIDInfo{}, "sroce_ctl_cm_conn": CMConn{},
	"sroce_ctl_cm_option": CMOption{}, "sroce_ctl_cm_event": CMEvent{}, "sroce_ctl_cm_mcast": CMMcast{},
}

var (
	structRE = regexp.MustCompile(`(?s)\nstruct (\w+) \{\n(.*?)\n\};`)
	memberRE = regexp.MustCompile(`^\s*(?:struct \w+|\w+)\s+(\w+)(?:\[[^\]]*\])?;`)
)

// TestHeaderLayout reads every struct of sroce_ctl.h, pairs each member
// with the Go field of the same name (case and underscores aside; reserved
// members are padding), and compiles a C program that prints their offsets
// and the structs' sizes to compare with Go's.
func TestHeaderLayout(t *testing.T) {
	src, err := os.ReadFile("sroce_ctl.h")
	if err != nil {
		t.Fatal(err)
	}
	type check struct {
		c    string
		want uintptr
	}
	var checks []check
	seen := map[string]bool{}
	for _, m := range structRE.FindAllStringSubmatch(string(src), -1) {
		name := m[1]
		v, ok := goStructs[name]
		if !ok {
			t.Errorf("struct %s has no Go struct in goStructs", name)
			continue
		}
		seen[name] = true
		typ := reflect.TypeOf(v)
		fields := map[string]reflect.StructField{}
		for i := 0; i < typ.NumField(); i++ {
			if f := typ.Field(i); f.Name != "_" {
				fields[strings.ToLower(f.Name)] = f
			}
		}
		checks = append(checks, check{fmt.Sprintf("sizeof(struct %s)", name), typ.Size()})
		used := 0
		for _, line := range strings.Split(m[2], "\n") {
			mm := memberRE.FindStringSubmatch(line)
			if mm == nil || strings.HasPrefix(mm[1], "reserved") {
				continue
			}
			f, ok := fields[strings.ReplaceAll(mm[1], "_", "")]
			if !ok {
				t.Errorf("struct %s: member %s has no Go field in %s", name, mm[1], typ.Name())
				continue
			}
			used++
			checks = append(checks, check{fmt.Sprintf("offsetof(struct %s, %s)", name, mm[1]), f.Offset})
		}
		if used != len(fields) {
			t.Errorf("struct %s: %d members paired, Go's %s has %d named fields", name, used, typ.Name(), len(fields))
		}
	}
	for name := range goStructs {
		if !seen[name] {
			t.Errorf("struct %s not found in sroce_ctl.h", name)
		}
	}
	for _, k := range []struct {
		c string
		v uintptr
	}{{"SROCE_CTL_MAGIC", Magic}, {"SROCE_CTL_VERSION", Version}, {"SROCE_CTL_MAX_MSG", MaxMsg},
		{"SROCE_CTL_MAX_FDS", MaxFDs}, {"SROCE_CTL_NAME", NameLen}, {"SROCE_OP_CREATE_QP", uintptr(OpCreateQP)},
		{"SROCE_OP_DESTROY_AH", uintptr(OpDestroyAH)}, {"SROCE_OP_QUERY_SRQ", uintptr(OpQuerySRQ)},
		{"SROCE_OP_REREG_MR", uintptr(OpReregMR)}, {"SROCE_OP_QUERY_RES", uintptr(OpQueryRes)}, {"SROCE_RES_CM_ID", uintptr(ResKindCMID)}, {"SROCE_OP_RESIZE_CQ", uintptr(OpResizeCQ)},
		{"SROCE_OP_CM_CREATE_CHANNEL", uintptr(OpCMCreateChannel)}, {"SROCE_OP_CM_MIGRATE_ID", uintptr(OpCMMigrateID)},
		{"SROCE_OP_CM_ACCEPT", uintptr(OpCMAccept)}, {"SROCE_OP_CM_LEAVE_MCAST", uintptr(OpCMLeaveMcast)}, {"SROCE_CTL_CM_PRIVATE", CMPrivate},
		{"SROCE_CTX_BELL_WORDS", CtxBellWords}, {"SROCE_CTX_BELLS", CtxBells}, {"sizeof(struct sroce_ctx_page)", CtxPageSize}} {
		checks = append(checks, check{k.c, k.v})
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot check sroce_ctl.h against the Go layout")
	}
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"sroce_ctl.h\"\nint main(void) {\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "\tprintf(\"%%lu\\n\", (unsigned long)(%s));\n", c.c)
	}
	b.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(prog, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	inc, _ := filepath.Abs(".")
	exe := filepath.Join(dir, "prog")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", inc, "-o", exe, prog).CombinedOutput(); err != nil {
		t.Fatalf("compiling against sroce_ctl.h: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).Output()
	if err != nil {
		t.Fatal(err)
	}
	vals := strings.Fields(string(out))
	if len(vals) != len(checks) {
		t.Fatalf("%d values from C, want %d", len(vals), len(checks))
	}
	for i, c := range checks {
		v, _ := strconv.ParseUint(vals[i], 10, 64)
		if uintptr(v) != c.want {
			t.Errorf("%s: C says %d, Go says %d", c.c, v, c.want)
		}
	}
	if len(checks) < 150 {
		t.Errorf("only %d checks: the header parse missed members", len(checks))
	}
}

// TestParse checks the framing's refusals.
func TestParse(t *testing.T) {
	body := Handle{Handle: 7}
	msg := Append(nil, Hdr{Op: OpDeallocPD, Seq: 3}, Bytes(&body))
	h, b, err := Parse(msg)
	if err != nil || h.Op != OpDeallocPD || h.Seq != 3 {
		t.Fatalf("Parse = %+v, %v", h, err)
	}
	if got, err := Get[Handle](b); err != nil || got.Handle != 7 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := Get[QPAttr](b); err != ErrShort {
		t.Errorf("short body: %v", err)
	}
	bad := append([]byte(nil), msg...)
	bad[0] ^= 1
	for name, m := range map[string][]byte{"short": msg[:5], "magic": bad, "length": msg[:len(msg)-1]} {
		if _, _, err := Parse(m); err == nil {
			t.Errorf("%s: Parse accepted it", name)
		}
	}
}

// FuzzParse feeds arbitrary datagrams to the framing and to every body
// decoder: errors, never a panic, and a datagram Parse accepts keeps its
// length.
func FuzzParse(f *testing.F) {
	h := Hello{ABI: Version}
	f.Add(Append(nil, Hdr{Op: OpHello, Seq: 1}, Bytes(&h)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hdr, body, err := Parse(b)
		if err != nil {
			return
		}
		if int(hdr.Len) != len(b) || len(body) != len(b)-HdrSize {
			t.Fatalf("accepted a datagram of %d bytes whose header says %d", len(b), hdr.Len)
		}
		Get[Hello](body)
		Get[RegMR](body)
		Get[ReregMR](body)
		Get[ResizeCQ](body)
		Get[ModifyQP](body)
		Get[CreateQP](body)
		Get[AH](body)
		Get[CMConn](body)
		Get[CMAddrReq](body)
		Name(body)
	})
}
