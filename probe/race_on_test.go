//go:build race

package probe

// raceEnabled: the race detector makes long allocation-heavy tests ~5x
// slower; they skip themselves under it.
const raceEnabled = true
