//go:build race

package main

// raceEnabled: the race detector multiplies a process's memory several
// times over, so a bound on tokentop's own peak RSS does not hold under it.
const raceEnabled = true
