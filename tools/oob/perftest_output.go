package oob

// What perftest 4.5's tools print, line by line: the banner
// (ctx_print_test_info), the address lines (ctx_print_pingpong_data) and
// the result tables (print_full_bw_report, print_report_lat,
// print_report_lat_duration). The column layouts are perftest's printf
// formats, tabs included; testdata/real-*.out are the outputs of the real
// tools for comparison.

import (
	"fmt"
	"github.com/sroce/sroce/verbs"
	"strconv"
	"strings"
)

// ResultLine is the rule perftest prints around its banner and tables.
const ResultLine = "---------------------------------------------------------------------------------------\n"

// WaitingBanner is what a perftest server prints before waiting for its
// client (with full verbosity).
const WaitingBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// UnknownDeviceInlineNote is what perftest prints to stderr (after a
// ResultLine on stdout) when the device is not one it knows and inline
// data was requested or, for READ and atomic tests, always disabled: rxe,
// and so sroce, get it from every ib_read_* and ib_atomic_* run.
const UnknownDeviceInlineNote = "Device not recognized to implement inline feature. Disabling it\n"

// Table headers.
const (
	bwHeaderMB  = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	bwHeaderGb  = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	latHeader   = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latDurHdr   = " #bytes        #iterations       t_avg[usec]    tps average"
	cpuUtilHead = "    CPU_Util[%]\n"
)

// DeviceInfo is what the banner says about the device and the settings
// that depend on it.
type DeviceInfo struct {
	Device    string    // -d value or the first device (sroce: the interface)
	Transport string    // "IB" for RoCE and rxe
	LinkLayer string    // "Ethernet" or "IB"
	MTU       verbs.MTU // path MTU after the exchange
	GIDIndex  int       // the GID index in use (-1: none)
	OutReads  int       // READ/atomic: the outstanding reads in use
	Inline    int       // the inline size in use (0 on devices perftest does not know)
	// NewPostSend is perftest's ibv_wr* API, which it uses only on the
	// Mellanox/EFA devices it knows: off for rxe and sroce.
	NewPostSend bool
}

// TestInfo returns perftest's banner for p on device d, from the first
// rule to the last.
func TestInfo(p Params, d DeviceInfo) string {
	if p.Output != FullVerbosity {
		return ""
	}
	var b strings.Builder
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString([...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}[p.Test.Verb()] + " ")
	if p.Test.Verb() == VerbAtomic {
		b.WriteString(p.Atomic.String() + " ")
	}
	if p.Test.IsBW() {
		if p.Duplex {
			b.WriteString("Bidirectional ")
		}
		if p.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	if p.Events {
		fmt.Fprintf(&b, " Test with events. Using %s_comp%d\n", d.Device, 0)
	}
	onOff := func(v bool) string {
		if v {
			return "ON"
		}
		return "OFF"
	}
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", d.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", p.NumQPs, d.Transport)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", p.Conn, onOff(p.UseSRQ))
	fmt.Fprintf(&b, " PCIe relax order: %s\n", onOff(!p.NoRelaxedOrdering))
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", onOff(d.NewPostSend && !p.OldPostSend))
	if p.Role == Client || p.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", p.PostList)
	}
	if p.RecvPost > 1 {
		fmt.Fprintf(&b, " Recv Post List  : %d\n", p.RecvPost)
	}
	if p.Test.Verb() == VerbSend && (p.Role == Server || p.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", p.RxDepth)
	}
	if p.Test.IsBW() {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", d.MTU.Bytes())
	fmt.Fprintf(&b, " Link type       : %s\n", d.LinkLayer)
	if d.GIDIndex != DefGIDIndex {
		fmt.Fprintf(&b, " GID index       : %d\n", d.GIDIndex)
	}
	if p.Test.Verb() != VerbRead && p.Test.Verb() != VerbAtomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", d.Inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", d.OutReads)
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : %s\n", onOff(p.RDMACM))
	method := "Ethernet"
	if p.CommRDMACM {
		method = "rdma_cm"
	}
	fmt.Fprintf(&b, " Data ex. method : %s\n", method)
	if p.RDMACM && p.Role == Server {
		b.WriteString(ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP\n")
	}
	b.WriteString(ResultLine)
	return b.String()
}

// AddressLine returns perftest's lines about one QP: side is "local" or
// "remote"; READ tests add the outstanding reads, READ and WRITE tests the
// rkey and address (not over RDMA CM, -R or -z, where perftest prints the
// lines as for a SEND test: pass a SEND test); withGID (a GID index is in
// use) adds the GID line,
// whose bytes perftest prints in decimal:
//
//	" local address: LID 0000 QPN 0x0013 PSN 0x1a7e86 RKey 0x000496 VAddr 0x007f30e35a0000"
//	" GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01"
func AddressLine(side string, t Test, k KeyMsg, withGID bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side,
		cAltHex(uint64(k.LID), 4), cAltHex(uint64(k.QPN), 6), cAltHex(uint64(k.PSN), 6))
	switch t.Verb() {
	case VerbRead:
		fmt.Fprintf(&b, " OUT %s", cAltHex(uint64(k.OutReads), 4))
		fallthrough
	case VerbWrite:
		fmt.Fprintf(&b, " RKey %s VAddr %s", cAltHex(uint64(k.RKey), 8), cAltHex(k.VAddr, 16))
	}
	b.WriteByte('\n')
	if withGID {
		b.WriteString(" GID: ")
		for i, c := range k.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(pad0(strconv.Itoa(int(c)), 2))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// BWHeader returns the rule and column header of a BW table (with the
// CPU utilization column when cpuUtil).
func BWHeader(gbits, cpuUtil bool) string {
	h := bwHeaderMB
	if gbits {
		h = bwHeaderGb
	}
	ext := "\n"
	if cpuUtil {
		ext = cpuUtilHead
	}
	return ResultLine + h + ext
}

// BWRow returns one row of a BW table for r (perftest's
// print_full_bw_report). With --output=bandwidth or message_rate only that
// number is printed. In Gb/s with an average below 0.1 perftest switches
// to six decimals.
func BWRow(p Params, r BWReport) string {
	switch p.Output {
	case OutputBW:
		return strconv.FormatFloat(r.BWAvg, 'f', 6, 64) + "\n"
	case OutputMsgRate:
		return strconv.FormatFloat(r.MsgRate, 'f', 6, 64) + "\n"
	}
	if r.BWAvg < 0.1 && p.ReportGbits {
		// " %-7lu    %lu           %-7.6lf            %-7.6lf            %-7.6lf"
		return " " + cUint(r.Size, -7) + "    " + strconv.FormatUint(r.Iters, 10) + "           " +
			cFloat(r.BWPeak, -7, 6) + "            " + cFloat(r.BWAvg, -7, 6) + "            " +
			cFloat(r.MsgRate, -7, 6) + "\n"
	}
	// " %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf"
	return " " + cUint(r.Size, -7) + "    " + cUint(r.Iters, -10) + "       " +
		cFloat(r.BWPeak, -7, 2) + "            " + cFloat(r.BWAvg, -7, 2) + "\t\t   " +
		cFloat(r.MsgRate, -7, 6) + "\n"
}

// LatHeader returns the rule and column header of a latency table:
// iteration mode or, with -D, duration mode.
func LatHeader(duration, cpuUtil bool) string {
	h := latHeader
	if duration {
		h = latDurHdr
	}
	ext := "\n"
	if cpuUtil {
		ext = cpuUtilHead
	}
	return ResultLine + h + ext
}

// LatReport is one row of a latency table in microseconds (or cycles with
// -C), as perftest computes it (see NewLatReport).
type LatReport struct {
	Size, Iters                    uint64
	Min, Max, Typical, Avg, StdDev float64
	P99, P999                      float64
}

// LatRow returns the row for r; with --output=latency just the average.
func LatRow(p Params, r LatReport) string {
	if p.Output == OutputLat {
		return strconv.FormatFloat(r.Avg, 'f', 6, 64) + "\n"
	}
	// " %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
	return " " + cUint(r.Size, -7) + " " + strconv.FormatUint(r.Iters, 10) + "          " +
		cFloat(r.Min, -7, 2) + "        " + cFloat(r.Max, -7, 2) + "      " + cFloat(r.Typical, -7, 2) +
		"  \t       " + cFloat(r.Avg, -7, 2) + "     \t" + cFloat(r.StdDev, -7, 2) + "\t\t" +
		cFloat(r.P99, -7, 2) + " \t\t" + cFloat(r.P999, -7, 2) + "\n"
}

// LatDurationRow returns the row of a -D latency test: the average
// latency and transactions per second (perftest's
// print_report_lat_duration); with --output=latency just the average.
func LatDurationRow(p Params, size, iters uint64, avg, tps float64) string {
	if p.Output == OutputLat {
		return strconv.FormatFloat(avg, 'f', 6, 64) + "\n"
	}
	// " %-7lu       %lu            %-7.2f        %-7.2f"
	return " " + cUint(size, -7) + "       " + strconv.FormatUint(iters, 10) + "            " +
		cFloat(avg, -7, 2) + "        " + cFloat(tps, -7, 2) + "\n"
}

// LatSamples returns perftest's -U/-H listing: "#, usec" and one
// "i, value" line per sample.
func LatSamples(units string, samples []float64) string {
	var b strings.Builder
	b.WriteString("#, " + units + "\n")
	for i, v := range samples {
		b.WriteString(strconv.Itoa(i+1) + ", " + cG(v) + "\n")
	}
	return b.String()
}
