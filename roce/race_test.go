//go:build race

package roce_test

// The race detector slows the engine about forty times; long tests scale
// down under it.
const raceEnabled = true
