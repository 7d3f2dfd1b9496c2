package main

// sroce rping: rdma-core's rping (RDMA CM connection, RDMA READ/WRITE
// ping-pong), which package tools/rping runs.

import (
	"context"

	"github.com/sroce/sroce/tools/rping"
)

// runRping implements "sroce rping".
func runRping(e *env, args []string) int {
	return rping.Main(context.Background(), args, e.Stdout, e.Stderr)
}
