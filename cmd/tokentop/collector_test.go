package main

import (
	"runtime/debug"
	"testing"

	"github.com/tokentop/tokentop/config"
)

func TestLeanCollectorAtScaleOnly(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	closed := func(n int) config.Class {
		return config.Class{Arrival: config.Arrival{Process: config.ArrivalConcurrency, N: n}}
	}
	open := config.Class{Arrival: config.Arrival{Process: config.ArrivalPoisson, Rate: 50}}
	noEnv := func(string) string { return "" }
	for _, c := range []struct {
		name    string
		getenv  func(string) string
		classes []config.Class
		want    int
	}{
		{"a probe-sized run", noEnv, []config.Class{closed(4), open}, 0},
		{"255 streams and an open-loop class", noEnv, []config.Class{closed(200), closed(55), open}, 0},
		{"256 streams", noEnv, []config.Class{closed(200), closed(56)}, leanCollectorPercent},
		{"1,000 streams, GOGC set", func(k string) string {
			if k == "GOGC" {
				return "200"
			}
			return ""
		}, []config.Class{closed(1000)}, 0},
	} {
		debug.SetGCPercent(100)
		got := leanCollector(c.getenv, c.classes)
		now := debug.SetGCPercent(100)
		if got != c.want || (c.want != 0 && now != c.want) || (c.want == 0 && now != 100) {
			t.Errorf("%s: set %d (collector at %d), want %d", c.name, got, now, c.want)
		}
	}
}
