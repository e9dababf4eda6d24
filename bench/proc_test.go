package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		user, sys  time.Duration
		err        bool
	}{
		{"plain", "4242 (tokentop) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 12 0 100 0 0", 2500 * time.Millisecond, 750 * time.Millisecond, false},
		{"name with spaces and parens", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5 0 0", 30 * time.Millisecond, 40 * time.Millisecond, false},
		{"truncated", "7 (x) R 1 7 7", 0, 0, true},
		{"no name", "7 x R 1 7 7 0 -1 0 0 0 0 0 3 4", 0, 0, true},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 three 4 0", 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, sys, err := parseStat("stat", []byte(tc.stat))
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if user != tc.user || sys != tc.sys {
				t.Errorf("user %v sys %v, want %v %v", user, sys, tc.user, tc.sys)
			}
		})
	}
}

func TestProcessCPUOfThisProcess(t *testing.T) {
	// Burn a little CPU so the count is above zero ticks.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	user, sys, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if user+sys <= 0 {
		t.Errorf("user %v + sys %v: want some CPU after 50 ms of spinning", user, sys)
	}
	if _, _, err := ProcessCPU(-1); err == nil {
		t.Error("pid -1: want an error")
	}
}
