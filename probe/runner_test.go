package probe

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

// fakeServer answers in virtual time (inside a synctest bubble).
type fakeServer struct {
	service  time.Duration
	respond  func(n int64, r Request) observe.Trace // optional; default success
	n        atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64
}

func (f *fakeServer) streamTo(ctx context.Context, r *Request, tr *observe.Trace) {
	*tr = f.stream(ctx, *r)
}

func (f *fakeServer) stream(ctx context.Context, r Request) observe.Trace {
	n := f.n.Add(1)
	cur := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxSeen.Load()
		if cur <= m || f.maxSeen.CompareAndSwap(m, cur) {
			break
		}
	}
	tr := observe.Trace{Class: r.Class, Path: r.Target.Path, IntendedStart: r.IntendedStart, Sent: time.Now(), JobID: r.JobID, JobSize: r.JobSize, JobIndex: r.JobIndex, Attempt: r.Attempt, Deadline: r.Deadline, PromptTokensTarget: r.PromptTokens}
	select {
	case <-time.After(f.service):
	case <-ctx.Done():
		tr.End = time.Now()
		tr.Err = &observe.Error{Kind: observe.ErrCancelled, Msg: "cancelled"}
		return tr
	}
	tr.End = time.Now()
	if f.respond != nil {
		out := f.respond(n, r)
		out.IntendedStart, out.Sent, out.End, out.JobID, out.JobSize, out.JobIndex, out.Attempt, out.Deadline = tr.IntendedStart, tr.Sent, tr.End, tr.JobID, tr.JobSize, tr.JobIndex, tr.Attempt, tr.Deadline
		return out
	}
	tr.Valid, tr.SawDone = true, true
	return tr
}

type collector struct {
	mu sync.Mutex
	ts []observe.Trace
}

func (c *collector) sink(t *observe.Trace) {
	c.mu.Lock()
	c.ts = append(c.ts, *t)
	c.mu.Unlock()
}

func class(a config.Arrival) config.Class {
	return config.Class{Name: "c", Kind: config.KindInteractive, API: "chat", Arrival: a, PromptTokens: config.Tokens{Fixed: 8}, MaxTokens: 4}
}

func runFor(t *testing.T, r *Runner, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := r.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerOpenLoopIgnoresResponseTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A server 20x slower than the arrival gap must not slow arrivals.
		f := &fakeServer{service: 2 * time.Second}
		var c collector
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalPoisson, Rate: 10}), f, c.sink,
			RunnerOptions{Seed: 1, Targets: []Target{{Path: observe.PathDirect, BaseURL: "d"}, {Path: observe.PathGateway, BaseURL: "g"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 500*time.Second)
		ok, cancelled, paths := 0, 0, map[string]int{}
		for _, tr := range c.ts {
			if tr.Err != nil && tr.Err.Kind == observe.ErrCancelled {
				cancelled++
				continue
			}
			ok++
			paths[tr.Path]++
			if tr.Sent.Before(tr.IntendedStart) {
				t.Fatalf("sent %v before intended %v", tr.Sent, tr.IntendedStart)
			}
		}
		if ok < 4800 || ok > 5200 {
			t.Errorf("%d requests in 500s at 10/s", ok)
		}
		if cancelled == 0 || r.InFlight() != 0 {
			t.Errorf("cancelled=%d inflight=%d: in-flight requests must end as cancelled traces", cancelled, r.InFlight())
		}
		if d := paths[observe.PathDirect] - paths[observe.PathGateway]; d < -1 || d > 1 {
			t.Errorf("paths %v do not alternate", paths)
		}
	})
}

func TestRunnerOpenLoopQueueingIsVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: time.Second}
		var c collector
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalConstant, Rate: 10}), f, c.sink,
			RunnerOptions{Targets: []Target{{BaseURL: "d"}}, maxInFlight: 2})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 20*time.Second)
		if m := f.maxSeen.Load(); m > 2 {
			t.Fatalf("in flight reached %d over the cap of 2", m)
		}
		last := c.ts[len(c.ts)-1]
		for _, tr := range c.ts {
			if tr.Err == nil && tr.Sent.After(last.Sent) {
				last = tr
			}
		}
		if q := last.Sent.Sub(last.IntendedStart); q < 5*time.Second {
			t.Errorf("late request queued only %v client-side; the schedule must not bend to the cap", q)
		}
	})
}

func TestRunnerClosedLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: time.Second}
		var c collector
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalConcurrency, N: 4}), f, c.sink,
			RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 100*time.Second+time.Millisecond)
		if m := f.maxSeen.Load(); m != 4 {
			t.Errorf("max in flight %d, want 4", m)
		}
		if n := len(c.ts); n < 400 || n > 404 {
			t.Errorf("%d traces, want 400 (+4 cancelled)", n)
		}
	})
}

func TestRunnerClosedLoopBacksOffOnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{respond: func(int64, Request) observe.Trace {
			return observe.Trace{Err: &observe.Error{Kind: observe.ErrConnect}}
		}}
		var c collector
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalConcurrency, N: 2}), f, c.sink,
			RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 60*time.Second)
		if n := len(c.ts); n > 40 {
			t.Errorf("%d requests in 60s against a dead server; want backoff", n)
		}
	})
}

func TestRunnerRateCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{}
		var c collector
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalConcurrency, N: 50}), f, c.sink,
			RunnerOptions{Targets: []Target{{BaseURL: "d"}}, maxRate: 20})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 10*time.Second)
		if n := len(c.ts); n > 20*10+20+50 {
			t.Errorf("%d requests in 10s with a 20/s cap", n)
		}
	})
}

func TestRunnerRetryAfterPausesClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{respond: func(n int64, _ Request) observe.Trace {
			if n == 1 {
				return observe.Trace{Status: 429, RetryAfter: 30 * time.Second, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 429}}
			}
			return observe.Trace{Valid: true}
		}}
		var c collector
		r, err := newRunner(class(config.Arrival{Process: config.ArrivalConstant, Rate: 1}), f, c.sink,
			RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 60*time.Second+time.Millisecond)
		first := c.ts[0].End
		for _, tr := range c.ts[1:] {
			if tr.Sent.Sub(first) > 0 && tr.Sent.Sub(first) < 30*time.Second {
				t.Fatalf("request sent %v after a 429 asking for 30s", tr.Sent.Sub(first))
			}
		}
		throttled := 0
		for _, tr := range c.ts {
			if tr.Err != nil && tr.Err.Kind == observe.ErrThrottled {
				throttled++
				if !tr.Sent.IsZero() {
					t.Errorf("a throttled arrival was sent at %v", tr.Sent)
				}
			}
		}
		if throttled < 28 || throttled > 31 {
			t.Errorf("%d arrivals throttled, want about 29", throttled)
		}
	})
}

func TestRunnerBatchJobsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: 100 * time.Millisecond, respond: func(n int64, r Request) observe.Trace {
			if n%5 == 0 || r.PromptTokens == 13 {
				return observe.Trace{Status: 500, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 500}}
			}
			return observe.Trace{Valid: true}
		}}
		var c collector
		cl := class(config.Arrival{Process: config.ArrivalConcurrency, N: 3})
		cl.Kind = config.KindBatch
		cl.Job = &config.Job{Requests: 10, Deadline: config.Duration{Duration: time.Minute}}
		r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 20*time.Second)
		jobs := map[string]int{}
		retries, willRetry := 0, 0
		firstTry := map[string]map[int]bool{}
		for _, tr := range c.ts {
			if tr.JobSize != 10 || tr.JobIndex < 0 || tr.JobIndex >= 10 {
				t.Fatalf("job size %d index %d", tr.JobSize, tr.JobIndex)
			}
			if tr.Attempt == 0 {
				if firstTry[tr.JobID] == nil {
					firstTry[tr.JobID] = map[int]bool{}
				}
				if firstTry[tr.JobID][tr.JobIndex] {
					t.Fatalf("job %s index %d sent twice as a first attempt", tr.JobID, tr.JobIndex)
				}
				firstTry[tr.JobID][tr.JobIndex] = true
			}
			if tr.JobID == "" || tr.Deadline.IsZero() {
				t.Fatalf("batch trace without job: %+v", tr)
			}
			jobs[tr.JobID]++
			if tr.Attempt > 0 {
				retries++
			}
			if tr.WillRetry {
				willRetry++
				if tr.Valid {
					t.Fatal("a valid request marked for retry")
				}
			}
			if tr.Attempt >= maxAttempts {
				t.Fatalf("attempt %d beyond the bound", tr.Attempt)
			}
		}
		// Every WillRetry was either sent again or is still pending.
		if retries == 0 || willRetry != retries+len(r.jobs.pending) {
			t.Errorf("retries=%d willRetry=%d pending=%d", retries, willRetry, len(r.jobs.pending))
		}
		if len(jobs) < 3 {
			t.Errorf("jobs %v", jobs)
		}
	})
}

func TestNewRunnerRejects(t *testing.T) {
	f := &fakeServer{}
	sink := func(*observe.Trace) {}
	tgt := []Target{{BaseURL: "d"}}
	for name, tc := range map[string]struct {
		cl   config.Class
		sink Sink
		tgt  []Target
	}{
		"no targets":   {class(config.Arrival{Process: config.ArrivalPoisson, Rate: 1}), sink, nil},
		"rate 0":       {class(config.Arrival{Process: config.ArrivalPoisson}), sink, tgt},
		"rate too big": {class(config.Arrival{Process: config.ArrivalPoisson, Rate: 1e6}), sink, tgt},
		"n too big":    {class(config.Arrival{Process: config.ArrivalConcurrency, N: 1e6}), sink, tgt},
		"unknown":      {class(config.Arrival{Process: "zipf", Rate: 1}), sink, tgt},
	} {
		if _, err := newRunner(tc.cl, f, tc.sink, RunnerOptions{Targets: tc.tgt}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Without a sink or an emit, Run has nowhere to put its traces.
	if r, err := newRunner(class(config.Arrival{Process: config.ArrivalPoisson, Rate: 1}), f, nil, RunnerOptions{Targets: tgt}); err != nil {
		t.Fatal(err)
	} else if err := r.Run(context.Background(), nil); err == nil {
		t.Error("Run without an emit accepted")
	}
	if _, err := NewRunner(class(config.Arrival{Process: config.ArrivalPoisson, Rate: 1}), nil, RunnerOptions{Targets: tgt}); err == nil {
		t.Error("nil client accepted")
	}
}

// TestLagMonitor runs the monitor on the synctest bubble's clock, where
// timers fire exactly on time: the only lag is what emit itself holds the
// loop up, as a starved process would.
func TestLagMonitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 100 * time.Millisecond
		m := NewLagMonitor(every)
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		var got []observe.LagSample
		err := m.Run(ctx, func(ev observe.Event) {
			got = append(got, *ev.(*observe.LagSample))
			switch len(got) {
			case 1:
				// Past the next tick by 7 ms: that tick reads 7 ms late,
				// and the one after is on time again.
				time.Sleep(every + 7*time.Millisecond)
			case 5:
				cancel()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		wantAt := []time.Duration{100, 207, 300, 400, 500}
		wantLag := []time.Duration{0, 7, 0, 0, 0}
		if len(got) != len(wantAt) {
			t.Fatalf("%d samples, want %d", len(got), len(wantAt))
		}
		for i, s := range got {
			if at := s.At.Sub(start); at != wantAt[i]*time.Millisecond || s.Lag != wantLag[i]*time.Millisecond {
				t.Errorf("sample %d at +%v: lag %v, want +%v and %v", i, at, s.Lag, wantAt[i]*time.Millisecond, wantLag[i]*time.Millisecond)
			}
		}
	})
	if err := NewLagMonitor(0).Run(t.Context(), func(observe.Event) {}); err == nil {
		t.Error("interval 0 accepted")
	}
}

func TestLagMonitorCPU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cpu time.Duration
		ok := true
		m := NewLagMonitor(100 * time.Millisecond)
		// Each read of the fake CPU clock advances it as if the process had
		// kept 1.5 cores busy for the 100 ms tick; the fourth read fails.
		m.cpu = func() (time.Duration, bool) {
			defer func() { cpu += 150 * time.Millisecond }()
			return cpu, ok
		}
		ctx, cancel := context.WithCancel(t.Context())
		var got []observe.LagSample
		err := m.Run(ctx, func(ev observe.Event) {
			got = append(got, *ev.(*observe.LagSample))
			if len(got) == 3 {
				ok = false
			}
			if len(got) == 5 {
				cancel()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 {
			t.Fatalf("%d samples, want 5", len(got))
		}
		for i, s := range got {
			want := 1.5
			if i >= 3 {
				want = -1 // unknown from the failed read on
			}
			if s.CPU < want-1e-9 || s.CPU > want+1e-9 || s.Cores < 1 {
				t.Errorf("sample %d: CPU %v on %d cores, want %v", i, s.CPU, s.Cores, want)
			}
		}
	})
}

func TestLagMonitorRealCPU(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var got []observe.LagSample
	m := NewLagMonitor(20 * time.Millisecond)
	err := m.Run(ctx, func(ev observe.Event) {
		s := *ev.(*observe.LagSample)
		got = append(got, s)
		if len(got) == 3 {
			cancel()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got {
		if s.CPU < 0 || s.CPU > 64 || s.Lag < 0 {
			t.Errorf("sample %+v", s)
		}
	}
}

func TestRunnerTokensPerMinuteCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeServer{service: 10 * time.Millisecond}
		var c collector
		cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 10})
		cl.PromptTokens = config.Tokens{Fixed: 1000}
		// 1004 tokens per request against 60240/min: one request a second.
		r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}, maxTokensPerMinute: 60240, maxInFlight: 1000})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 120*time.Second)
		sent := 0
		for _, tr := range c.ts {
			if tr.Err == nil {
				sent++
			}
		}
		// 120 s at 1/s plus a 10 s burst.
		if sent < 120 || sent > 132 {
			t.Errorf("%d requests in 120s under a one-per-second token cap", sent)
		}
	})
}

func TestRunnerSharedPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			prompts []string
		)
		f := &fakeServer{respond: func(_ int64, r Request) observe.Trace {
			mu.Lock()
			prompts = append(prompts, r.Prompt)
			mu.Unlock()
			return observe.Trace{Valid: true}
		}}
		var c collector
		cl := class(config.Arrival{Process: config.ArrivalConstant, Rate: 1})
		cl.PromptTokens = config.Tokens{Fixed: 100}
		r, err := newRunner(cl, f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}, sharedPrefixTokens: 30})
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, r, 5*time.Second+time.Millisecond)
		if len(prompts) < 4 {
			t.Fatalf("%d prompts", len(prompts))
		}
		a, b := strings.Fields(prompts[0]), strings.Fields(prompts[1])
		if len(a) != 100 || len(b) != 100 {
			t.Fatalf("prompt words %d, %d, want 100", len(a), len(b))
		}
		if strings.Join(a[:30], " ") != strings.Join(b[:30], " ") {
			t.Error("shared prefix differs between requests")
		}
		if a[30] == b[30] || !strings.HasPrefix(a[30], "tt") {
			t.Errorf("unique marker %q / %q must follow the shared prefix", a[30], b[30])
		}
	})
}

// TestRunOnce: one request per path, batch classes included, none retried,
// and RunOnce returns when they have ended.
func TestRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		batch := class(config.Arrival{Process: config.ArrivalConcurrency, N: 8})
		batch.Kind = config.KindBatch
		batch.Job = &config.Job{Requests: 50, Deadline: config.Duration{Duration: time.Minute}}
		for _, tc := range []struct {
			name    string
			cl      config.Class
			targets []Target
		}{
			{"interactive, one path", class(config.Arrival{Process: config.ArrivalPoisson, Rate: 100}), []Target{{Path: observe.PathDirect, BaseURL: "d"}}},
			{"batch, two paths", batch, []Target{{Path: observe.PathDirect, BaseURL: "d"}, {Path: observe.PathGateway, BaseURL: "g"}}},
		} {
			f := &fakeServer{service: 2 * time.Second, respond: func(_ int64, r Request) observe.Trace {
				return observe.Trace{Path: r.Target.Path, Err: &observe.Error{Kind: observe.ErrHTTP, Status: 503}} // retryable, were it a job
			}}
			var c collector
			r, err := newRunner(tc.cl, f, c.sink, RunnerOptions{Targets: tc.targets})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r.RunOnce(t.Context(), nil)
			if took := time.Since(start); took != 2*time.Second {
				t.Errorf("%s: RunOnce returned after %v, want when the requests ended (2s)", tc.name, took)
			}
			paths := map[string]int{}
			for _, tr := range c.ts {
				paths[tr.Path]++
				if tr.WillRetry || tr.JobID != "" {
					t.Errorf("%s: trace marked for retry (%v) or in a job (%q)", tc.name, tr.WillRetry, tr.JobID)
				}
			}
			if len(c.ts) != len(tc.targets) || len(paths) != len(tc.targets) {
				t.Errorf("%s: %d requests over paths %v, want one per path", tc.name, len(c.ts), paths)
			}
		}
	})
}

// A calibration pulse's hold sends nothing and leaves no trace: the
// arrivals it skips were tokentop's choice, not the server's refusal.
// Requests already in flight run on; the class resumes when it ends.
func TestRunnerHoldSendsNothingAndLeavesNoTrace(t *testing.T) {
	for _, a := range []config.Arrival{
		{Process: config.ArrivalConstant, Rate: 1},
		{Process: config.ArrivalConcurrency, N: 2},
	} {
		t.Run(a.Process, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeServer{service: time.Second}
				var c collector
				r, err := newRunner(class(a), f, c.sink, RunnerOptions{Targets: []Target{{BaseURL: "d"}}})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				from, till := start.Add(10500*time.Millisecond), start.Add(30*time.Second)
				go func() {
					time.Sleep(from.Sub(start))
					r.Hold(till)
				}()
				runFor(t, r, 60*time.Second+time.Millisecond)
				var before, after, ended int
				for _, tr := range c.ts {
					if tr.Err != nil && tr.Err.Kind == observe.ErrThrottled {
						t.Fatalf("a held arrival was accounted as throttled: %+v", tr)
					}
					switch {
					case tr.Sent.Before(from):
						before++
						if tr.End.After(from) && !tr.End.After(from.Add(time.Second)) {
							ended++
						}
					case tr.Sent.Before(till):
						t.Errorf("request sent %v into the hold", tr.Sent.Sub(from))
					default:
						after++
					}
				}
				if before < 9 || after < 28 {
					t.Errorf("%d requests sent before the hold and %d after, want about 10 and 30 (1/s, or 2 streams of 1 s)", before, after)
				}
				if ended == 0 {
					t.Errorf("no request in flight at the hold's start ran on to its end")
				}
			})
		})
	}
}
