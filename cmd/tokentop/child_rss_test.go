package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"time"
)

// followPeakRSS follows the peak resident set (VmHWM) of process pid in
// /proc until the returned function is called, which returns it in bytes
// (0 when it was never read). A child's rusage is no use for this: Go
// starts a child with vfork, and exec records the parent's peak as the
// child's (Linux, fs/exec.c), so /bin/true run from a test process of
// 200 MiB "peaks" at 202 MiB.
func followPeakRSS(pid int) (stop func() int64) {
	var peak int64 // the goroutine's until finished is closed
	done := make(chan struct{})
	finished := make(chan struct{})
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	go func() {
		defer close(finished)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, vmHWM(path))
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-finished
		return peak
	}
}

// vmHWM is the VmHWM line of a /proc/PID/status file in bytes; 0 when it
// cannot be read (the process ended).
func vmHWM(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 2 && string(f[1]) == "kB" {
			if kb, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil {
				return kb << 10
			}
		}
		return 0
	}
	return 0
}
