package main

// sroce send-bw, write-bw, read-bw, atomic-bw, send-lat, write-lat,
// read-lat and atomic-lat: perftest's ib_* tools, which package
// tools/perftest runs.

import (
	"context"

	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/tools/perftest"
)

// runSendBW implements "sroce send-bw" (ib_send_bw).
func runSendBW(e *env, args []string) int { return runPerftest(e, oob.SendBW, args) }

// runWriteBW implements "sroce write-bw" (ib_write_bw).
func runWriteBW(e *env, args []string) int { return runPerftest(e, oob.WriteBW, args) }

// runReadBW implements "sroce read-bw" (ib_read_bw).
func runReadBW(e *env, args []string) int { return runPerftest(e, oob.ReadBW, args) }

// runAtomicBW implements "sroce atomic-bw" (ib_atomic_bw).
func runAtomicBW(e *env, args []string) int { return runPerftest(e, oob.AtomicBW, args) }

// runSendLat implements "sroce send-lat" (ib_send_lat).
func runSendLat(e *env, args []string) int { return runPerftest(e, oob.SendLat, args) }

// runWriteLat implements "sroce write-lat" (ib_write_lat).
func runWriteLat(e *env, args []string) int { return runPerftest(e, oob.WriteLat, args) }

// runReadLat implements "sroce read-lat" (ib_read_lat).
func runReadLat(e *env, args []string) int { return runPerftest(e, oob.ReadLat, args) }

// runAtomicLat implements "sroce atomic-lat" (ib_atomic_lat).
func runAtomicLat(e *env, args []string) int { return runPerftest(e, oob.AtomicLat, args) }

// runPerftest runs one perftest tool.
func runPerftest(e *env, test oob.Test, args []string) int {
	return perftest.Run(context.Background(), test, args, e.Stdout, e.Stderr)
}
