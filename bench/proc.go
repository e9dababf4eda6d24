// Package bench owns what tokentop's benchmarks share to measure a process
// other than their own: its CPU time, read from /proc. Benchmarks run the
// simulator and tokentop as separate processes so that each one's CPU is
// its own; this is how the other one's is read.
package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/PID/stat's times on Linux (USER_HZ).
const userHZ = 100

// ProcessCPU returns a running process's user and system time so far, from
// /proc/PID/stat (Linux; 10 ms resolution).
func ProcessCPU(pid int) (user, sys time.Duration, err error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("reading a process's CPU: %w", err)
	}
	return parseStat(path, raw)
}

func parseStat(path string, raw []byte) (user, sys time.Duration, err error) {
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses: fields are counted after its last closing one.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("%s: %d fields after the command name, want at least 13", path, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil || utime < 0 || stime < 0 {
		return 0, 0, fmt.Errorf("%s: utime %q, stime %q are not tick counts", path, f[11], f[12])
	}
	return time.Duration(utime) * time.Second / userHZ, time.Duration(stime) * time.Second / userHZ, nil
}
