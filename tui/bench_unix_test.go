//go:build unix

package tui

import (
	"io"
	"syscall"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// BenchmarkIdleConsoleCPU runs the console as a bubbletea program at
// 200×60, fed a snapshot every 250 ms as the pipeline does, with data that
// does not change (the clock moves, the series gain a point a second),
// in colour, and reports the process's CPU time as a share of one core. Each
// iteration is one second of console time.
func BenchmarkIdleConsoleCPU(b *testing.B) {
	in, inW := io.Pipe()
	defer inW.Close()
	// Colour, as a terminal gets by default: the costlier frame.
	m := New(Options{})
	m.st.renderer = colorRenderer()
	p := tea.NewProgram(m, tea.WithInput(in), tea.WithOutput(io.Discard), tea.WithoutSignals())
	done := make(chan error, 1)
	go func() {
		_, err := p.Run()
		done <- err
	}()
	p.Send(tea.WindowSizeMsg{Width: 200, Height: 60})
	base, d := drillSnap(), failingDiag()
	tick := func(i int) {
		s := *base
		s.At = base.At.Add(time.Duration(i) * 250 * time.Millisecond)
		s.Series.End = base.Series.End.Add(time.Duration(i/4) * time.Second)
		p.Send(SnapshotMsg{Snap: &s, Diag: d, RunDiag: &d})
	}
	tick(0)
	time.Sleep(300 * time.Millisecond)
	cpu0, wall0 := cpuTime(b), time.Now()
	b.ResetTimer()
	i := 1
	for range b.N {
		for range 4 {
			time.Sleep(250 * time.Millisecond)
			tick(i)
			i++
		}
	}
	b.StopTimer()
	used, wall := cpuTime(b)-cpu0, time.Since(wall0)
	b.ReportMetric(100*used.Seconds()/wall.Seconds(), "%core")
	p.Quit()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
