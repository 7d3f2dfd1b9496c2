package rxeguest

import (
	"fmt"
	"os"
	"time"
)

// timing prints one line to standard error, "rxeguest: " followed by the
// message, when SROCE_TIMING is set (tests/run sets it, to report how long
// the image and every boot took).
func timing(format string, args ...any) {
	if os.Getenv("SROCE_TIMING") == "" {
		return
	}
	fmt.Fprintf(os.Stderr, "rxeguest: "+format+"\n", args...)
}

// since is d's time from start, rounded for a timing line.
func since(start time.Time) time.Duration {
	return time.Since(start).Round(100 * time.Millisecond)
}
