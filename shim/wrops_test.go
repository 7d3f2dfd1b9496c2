package shim

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sroce/sroce/verbs"
)

// The C library's table of work-request opcodes (libibverbs/sroce_wr_ops.h)
// is generated from verbs' table, the one the engine reads: the library
// checks a post against the same rows as the daemon's engine, without a
// round trip to the daemon, and a new verb enters both by a row in
// verbs/wrops.go and a rerun of this generator.

var updateWROps = flag.Bool("update-wrops", false, "rewrite libibverbs/"+wrOpsHeader+" from verbs' table")

const wrOpsHeader = "sroce_wr_ops.h"

// genWROpsHeader prints the C table.
func genWROpsHeader() []byte {
	var b bytes.Buffer
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("/*\n * %s: the table of work-request opcodes the library's post checks read.\n", wrOpsHeader)
	p(" * Generated from verbs/wrops.go by shim/wrops_test.go; do not edit. To\n")
	p(" * regenerate: go test ./shim -run TestWROpsHeader -update-wrops\n */\n")
	p("#ifndef SROCE_WR_OPS_H\n#define SROCE_WR_OPS_H\n\n#include <stdint.h>\n\n#include \"sroce_verbs.h\"\n\n")
	p("/* What a request does (verbs.WRClass). */\nenum {\n")
	for c := verbs.ClassSend; c <= verbs.ClassLocal; c++ {
		p("\tSROCE_WR_CLASS_%s = %d,\n", c, c)
	}
	p("};\n\n/* What data it carries (verbs.PayloadRule). */\nenum {\n")
	for r := verbs.PayloadMessage; r <= verbs.PayloadNone; r++ {
		p("\tSROCE_WR_PAYLOAD_%s = %d,\n", r, r)
	}
	p("};\n\n/* Flags of a row. */\nenum {\n")
	p("\tSROCE_WR_INLINE = 1 << 0,    /* IBV_SEND_INLINE applies */\n")
	p("\tSROCE_WR_IMM = 1 << 1,       /* carries imm_data */\n")
	p("\tSROCE_WR_INV = 1 << 2,       /* carries an R_Key to invalidate at the peer */\n")
	p("\tSROCE_WR_RD_ATOMIC = 1 << 3, /* takes a max_rd_atomic credit */\n")
	p("};\n\n")
	p("struct sroce_wr_op {\n")
	p("\tconst char *name;   /* NULL: the library does not offer the opcode */\n")
	p("\tuint16_t qp_types;  /* 1 << enum ibv_qp_type for each type that may post it */\n")
	p("\tuint8_t cls;        /* SROCE_WR_CLASS_* */\n")
	p("\tuint8_t payload;    /* SROCE_WR_PAYLOAD_* */\n")
	p("\tuint8_t flags;      /* SROCE_WR_* */\n")
	p("\tuint8_t wc_opcode;  /* enum ibv_wc_opcode of its completion */\n")
	p("\tuint64_t ex_flag;   /* its IBV_QP_EX_WITH_* bit (the ibv_wr_* API) */\n")
	p("};\n\n")
	n := 0
	for o := 0; o < verbs.NumWROpcodes; o++ {
		if i := verbs.WROpcode(o).Info(); i != nil && !i.KernelOnly {
			n = o + 1
		}
	}
	p("#define SROCE_NUM_WR_OPS %d\n\n", n)
	p("static const struct sroce_wr_op sroce_wr_ops[SROCE_NUM_WR_OPS] = {\n")
	var all []string
	for o := 0; o < n; o++ {
		i := verbs.WROpcode(o).Info()
		if i == nil || i.KernelOnly {
			continue
		}
		var flags []string
		for _, f := range []struct {
			on   bool
			name string
		}{{i.Inline, "INLINE"}, {i.Imm, "IMM"}, {i.Inv, "INV"}, {i.RdAtomic, "RD_ATOMIC"}} {
			if f.on {
				flags = append(flags, "SROCE_WR_"+f.name)
			}
		}
		fl := "0"
		for k, f := range flags {
			if k == 0 {
				fl = f
			} else {
				fl += " | " + f
			}
		}
		p("\t[IBV_WR_%s] = {\"%s\", 0x%04x, SROCE_WR_CLASS_%s, SROCE_WR_PAYLOAD_%s,\n\t\t\t%s, %d, IBV_QP_EX_WITH_%s},\n",
			i.Name, i.Name, uint16(i.Types), i.Class, i.Payload, fl, i.WC, i.Name)
		all = append(all, "IBV_QP_EX_WITH_"+i.Name)
	}
	p("};\n\n/* Every IBV_QP_EX_WITH_* bit of the table: what ibv_create_qp_ex accepts in send_ops_flags. */\n")
	p("#define SROCE_SEND_OPS (")
	for k, a := range all {
		if k > 0 {
			p(" | \\\n\t\t\t")
		}
		p("%s", a)
	}
	p(")\n\n")
	p("/* The row of opcode op, or NULL when the library does not offer it. */\n")
	p("static inline const struct sroce_wr_op *sroce_wr_op(int op)\n{\n")
	p("\tif (op < 0 || op >= SROCE_NUM_WR_OPS || !sroce_wr_ops[op].name)\n\t\treturn NULL;\n")
	p("\treturn &sroce_wr_ops[op];\n}\n\n#endif\n")
	return b.Bytes()
}

// TestWROpsHeader fails when the checked-in C table differs from what
// verbs' table generates (with -update-wrops it rewrites it).
func TestWROpsHeader(t *testing.T) {
	path := filepath.Join("libibverbs", wrOpsHeader)
	want := genWROpsHeader()
	if *updateWROps {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the C table: %v (generate it: go test ./shim -run TestWROpsHeader -update-wrops)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: verbs/wrops.go changed since it was generated; run go test ./shim -run TestWROpsHeader -update-wrops", path)
	}
}
