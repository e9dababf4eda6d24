package prom

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// forbiddenDeps are what the pure packages must never link: the network
// and TLS (a mapping or a verdict has no business dialling), subprocesses,
// and NVML (cgo and a driver); "/..." means the path and all below it.
// expfmt pulls in net/http, which is why the exposition parser lives in
// scrape and not here.
var forbiddenDeps = []string{"net/http", "crypto/tls", "os/exec", "github.com/NVIDIA/go-nvml/..."}

// forbidden reports whether dep is one of forbiddenDeps.
func forbidden(dep string) bool {
	for _, f := range forbiddenDeps {
		if root, ok := strings.CutSuffix(f, "/..."); ok {
			if dep == root || strings.HasPrefix(dep, root+"/") {
				return true
			}
		} else if dep == f {
			return true
		}
	}
	return false
}

// TestPureDeps: the pure packages (this one, observe, the aggregator in
// metrics, the recording, diagnose and report; the twin, the simulator's
// engine it replays and the console that shows it) link none of
// forbiddenDeps (the console may link os/exec: its terminal libraries,
// bubbletea and the clipboard, do, to run an editor or xclip),
// so that the measurements and the verdict can be built, tested and
// replayed anywhere; and the recording, a codec of the event stream,
// links nothing that aggregates or judges. It asks the go command, which a
// test binary may not find (a bare CI image): it then skips.
func TestPureDeps(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	out, err := exec.Command(goCmd, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == "/dev/null" {
		t.Fatalf("go env GOMOD = %q: not inside the module", gomod)
	}
	notInRecording := []string{"github.com/tokentop/tokentop/diagnose", "github.com/tokentop/tokentop/metrics"}
	for _, pkg := range []string{"./prom", "./observe", "./metrics/...", "./record", "./diagnose", "./report", "./twin", "./sim/engine", "./tui/..."} {
		cmd := exec.Command(goCmd, "list", "-deps", pkg)
		cmd.Dir = filepath.Dir(gomod)
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if forbidden(dep) && !(pkg == "./tui/..." && dep == "os/exec") {
				t.Errorf("%s links %s, which a pure package must not (go list -deps %s)", pkg, dep, pkg)
			}
			if pkg == "./record" && slices.Contains(notInRecording, dep) {
				t.Errorf("the recording links %s: it must stay a codec of the event stream", dep)
			}
		}
	}
}
