package main

// sroce rping: rdma-core's rping (RDMA CM connection, RDMA READ/WRITE
// ping-pong), which package tools/rping runs.

import (
	"context"
	"fmt"

	"github.com/sroce/sroce/tools/rping"
)

// runRping implements "sroce rping". -h prints the usage and exits 0 as
// every sroce command does; rping itself knows no -h and takes any other
// bad flag with its usage and EINVAL.
func runRping(e *env, args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintf(e.Stdout, "usage: sroce rping -s|-c [flags]\n\nrdma-core's rping on a sroce device: an RDMA CM connection, then RDMA READ/WRITE pings.\n\n")
		rping.Usage(e.Stdout)
		return exitOK
	}
	return rping.Main(context.Background(), args, e.Stdout, e.Stderr)
}
