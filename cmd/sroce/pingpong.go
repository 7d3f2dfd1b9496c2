package main

// sroce rc-pingpong and sroce ud-pingpong: rdma-core's ibv_rc_pingpong and
// ibv_ud_pingpong, which package tools/perftest runs.

import (
	"context"

	"github.com/sroce/sroce/tools/perftest"
)

// runRCPingpong implements "sroce rc-pingpong".
func runRCPingpong(e *env, args []string) int {
	return perftest.Pingpong(context.Background(), false, args, e.Stdout, e.Stderr)
}

// runUDPingpong implements "sroce ud-pingpong".
func runUDPingpong(e *env, args []string) int {
	return perftest.Pingpong(context.Background(), true, args, e.Stdout, e.Stderr)
}
