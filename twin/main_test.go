package twin

import (
	"flag"
	"os"
	"runtime"
	"testing"
)

// TestMain runs the package's tests on one core unless benchmarks or the
// larger matrices (TWIN_PAIRS, TWIN_SCENARIOS, TWIN_CAPACITY_CHECK) ask
// for the machine: the suite shares the 2-core CI machine with other
// packages' live tests (demos, tmux consoles, real nginx and Prometheus)
// whose servers run in real time, and a twin build on both cores made
// their simulated servers' steps late.
func TestMain(m *testing.M) {
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" && os.Getenv("TWIN_PAIRS") == "" &&
		os.Getenv("TWIN_SCENARIOS") == "" && os.Getenv("TWIN_CAPACITY_CHECK") == "" {
		runtime.GOMAXPROCS(1)
	}
	os.Exit(m.Run())
}
