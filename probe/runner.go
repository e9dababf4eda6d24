package probe

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentop/tokentop/observe"

	"github.com/tokentop/tokentop/config"
)

// Sink receives every finished request's Trace, once, from the request's
// goroutine, and owns it. It must not block long: it delays the next
// closed-loop request.
type Sink func(*observe.Trace)

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	Seed int64
	// Targets receive requests in turn when there are several (direct and
	// gateway), so both paths see the same traffic.
	Targets []Target
	Model   string
	// OnStarted, when set, is told of each request as it is sent, so that
	// requests still waiting count as lower bounds of their latency.
	OnStarted func(observe.Started)
	// OnFirstToken, when set, is told of each request's first content token
	// as it arrives, so TTFT can be shown for streams still running.
	OnFirstToken func(observe.FirstToken)
	// OnNotice, when set, is told once of each decision the runner takes
	// from what the server said (prompt calibration accepted or refused),
	// in words for the user.
	OnNotice func(string)
	// MaxRequestBytes is the absolute cap on one request body; 0 means
	// DefaultMaxRequestBytes. The class's own cap is lower (see
	// Runner.MaxRequestBytes).
	MaxRequestBytes int
	// OnGaps, when set, receives running streams' chunk gaps about once a
	// second (see Request.OnGaps).
	OnGaps func(observe.GapReport)

	// Calibration maps prompt tokens to words (see Calibrate). When nil,
	// the runner learns the ratio from the server's usage.prompt_tokens.
	Calibration *Calibration

	// What follows comes from the class's config (arrival, validate,
	// shared_prefix_tokens, tokens_per_minute) and the safety caps; tests
	// of this package set them directly, to exercise a cap below its
	// config value or a schedule without a file.

	// maxInFlight caps concurrent requests of an open-loop class; 0 means
	// config.MaxConcurrencyPerClass. Closed-loop classes use arrival.n.
	maxInFlight int
	// maxRate caps sends per second whatever the arrival process (catch-up
	// after a stall, a closed loop against a server that fails instantly);
	// 0 means config.MaxRatePerClass.
	maxRate float64
	// maxTokensPerMinute caps prompt + max_tokens sent per minute: the
	// lower of it and the class's tokens_per_minute wins; with neither,
	// DefaultMaxTokensPerMinute.
	maxTokensPerMinute int
	// replay replaces the class's arrival process: request i is sent at
	// start + replay[i].At/replaySpeed with that entry's prompt and output
	// tokens (see ReadReplay). replaySpeed 0 means 1; replayLoop starts over
	// after the last entry instead of going idle. Loaded from the class's
	// arrival.file when its process is replay.
	replay      []ReplayEntry
	replaySpeed float64
	replayLoop  bool
	// sharedPrefixTokens starts every prompt of the class with the same
	// text of about this many tokens (a system prompt), ahead of the
	// per-request unique marker, so a prefix cache can serve that part and
	// only that part (the class's shared_prefix_tokens).
	sharedPrefixTokens int
	// validate judges each response's text (the class's validate: regex,
	// json; see NewValidator).
	validate func(text string) error
}

// streamer is what a Runner needs from a Client; tests substitute it. It
// fills tr in place: a Trace passed by value is copied into every frame
// on the way, and a request's goroutine is parked at the bottom of that
// stack while its stream runs, a thousand of them at once.
type streamer interface {
	streamTo(ctx context.Context, r *Request, tr *observe.Trace)
}

// Runner generates one class's traffic.
type Runner struct {
	cl    config.Class
	s     streamer
	sink  Sink
	o     RunnerOptions
	ia    interarrival // nil for closed loop
	sizer PromptSizer
	limit *rateLimiter // requests
	tpm   *rateLimiter // tokens

	mu        sync.Mutex
	rng       *rand.Rand // prompts, jitter; guarded by mu
	pauseTill time.Time  // Retry-After; guarded by mu
	holdTill  time.Time  // a calibration pulse (Hold); guarded by mu
	jobs      *jobQueue  // nil unless the class has a job
	learned   usageCalibrator
	shared    string // shared prompt prefix; guarded by mu (built lazily once calibrated)
	sharedLen int    // tokens the shared prefix stands for
	sharedWds int    // words in the shared prefix

	seq      atomic.Uint64
	inFlight atomic.Int64

	maxBody  int // bytes; see MaxRequestBytes
	maxWords int // words a prompt may have under maxBody
}

// DefaultMaxRequestBytes caps one request body unless configured.
const DefaultMaxRequestBytes = config.DefaultMaxRequestBytes

// Request bodies are capped per class at the class's largest prompt at
// bytesPerTokenBound bytes per token, plus requestOverheadBytes for the
// JSON around it. Our words are at most six bytes with their space, and a
// plausible calibration is at least MinTokensPerWord tokens per word, so a
// prompt never needs more than 30 bytes per token.
const (
	bytesPerTokenBound   = 32
	requestOverheadBytes = 16 << 10
	maxBytesPerWord      = 6
)

// DefaultMaxTokensPerMinute is the per-class token cap when neither the
// class nor the options give one (see config.DefaultTokensPerMinute).
const DefaultMaxTokensPerMinute = config.DefaultTokensPerMinute

// Retry policy of batch jobs.
const (
	maxAttempts      = 3
	retryBaseBackoff = 500 * time.Millisecond
	retryMaxBackoff  = 8 * time.Second
)

// NewRunner builds the runner of class cl. The class must have passed
// config validation. Per-class settings come from cl: arrival (including a
// replay file, read now, so a missing or malformed trace is an error here
// and not a silent idle class), validate, shared_prefix_tokens and
// tokens_per_minute; fields set in o take precedence as documented on
// RunnerOptions. What it observes goes to the emit Run is given.
func NewRunner(cl config.Class, c *Client, o RunnerOptions) (*Runner, error) {
	if c == nil {
		return nil, errors.New("probe: runner needs a client")
	}
	return newRunner(cl, c, nil, o)
}

// classOptions fills what o leaves unset from the class's config.
func classOptions(cl config.Class, o RunnerOptions) (RunnerOptions, error) {
	if t := cl.TokensPerMinute; t > 0 && (o.maxTokensPerMinute <= 0 || t < o.maxTokensPerMinute) {
		o.maxTokensPerMinute = t
	}
	if o.sharedPrefixTokens <= 0 {
		o.sharedPrefixTokens = max(cl.SharedPrefixTokens, 0)
	}
	if o.validate == nil && cl.Validate != nil {
		v, err := NewValidator(cl.Validate.Regex, cl.Validate.JSON)
		if err != nil {
			return o, err
		}
		o.validate = v
	}
	if len(o.replay) == 0 && cl.Arrival.Process == config.ArrivalReplay {
		es, err := readReplayFile(cl.Arrival.File)
		if err != nil {
			return o, err
		}
		o.replay, o.replaySpeed, o.replayLoop = es, cl.Arrival.Speed, cl.Arrival.Loop
	}
	return o, nil
}

func readReplayFile(path string) ([]ReplayEntry, error) {
	if path == "" {
		return nil, errors.New("arrival replay needs a file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("arrival replay: %w", err)
	}
	defer f.Close()
	es, err := ReadReplay(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return es, nil
}

func newRunner(cl config.Class, s streamer, sink Sink, o RunnerOptions) (*Runner, error) {
	if len(o.Targets) == 0 {
		return nil, fmt.Errorf("probe: class %q: no targets", cl.Name)
	}
	o, err := classOptions(cl, o)
	if err != nil {
		return nil, fmt.Errorf("probe: class %q: %w", cl.Name, err)
	}
	if o.maxInFlight <= 0 || o.maxInFlight > config.MaxConcurrencyPerClass {
		o.maxInFlight = config.MaxConcurrencyPerClass
	}
	if o.maxRate <= 0 || o.maxRate > config.MaxRatePerClass {
		o.maxRate = config.MaxRatePerClass
	}
	r := &Runner{
		cl:    cl,
		s:     s,
		sink:  sink,
		o:     o,
		sizer: NewPromptSizer(cl.PromptTokens),
		rng:   rand.New(rand.NewPCG(uint64(o.Seed), 0x70726f6d7074)),
		limit: newRateLimiter(o.maxRate, time.Second),
	}
	if o.maxTokensPerMinute <= 0 {
		r.o.maxTokensPerMinute = DefaultMaxTokensPerMinute
	}
	if r.o.MaxRequestBytes <= 0 {
		r.o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	largest := r.sizer.Largest()
	for _, e := range o.replay {
		largest = max(largest, e.PromptTokens)
	}
	r.maxBody = min(largest*bytesPerTokenBound+requestOverheadBytes, r.o.MaxRequestBytes)
	r.maxWords = max((r.maxBody-requestOverheadBytes/2)/maxBytesPerWord, 1)
	// Ten seconds' worth of tokens may go at once: enough for any single
	// request under the cap, not enough to hit a server with a minute's
	// budget in one burst.
	r.tpm = newRateLimiter(float64(r.o.maxTokensPerMinute)/60, 10*time.Second)
	if cl.MaxTokens <= 0 || cl.MaxTokens > config.MaxMaxTokens {
		return nil, fmt.Errorf("probe: class %q: max_tokens %d outside 1..%d", cl.Name, cl.MaxTokens, config.MaxMaxTokens)
	}
	switch cl.Arrival.Process {
	case config.ArrivalReplay:
		// The schedule is o.replay, checked below.
	case config.ArrivalConcurrency:
		if cl.Arrival.N <= 0 || cl.Arrival.N > config.MaxConcurrencyPerClass {
			return nil, fmt.Errorf("probe: class %q: concurrency %d outside 1..%d", cl.Name, cl.Arrival.N, config.MaxConcurrencyPerClass)
		}
	default:
		if cl.Arrival.Rate > config.MaxRatePerClass {
			return nil, fmt.Errorf("probe: class %q: rate %.1f/s above the cap of %.0f/s", cl.Name, cl.Arrival.Rate, config.MaxRatePerClass)
		}
		ia, err := newInterarrival(cl.Arrival)
		if err != nil {
			return nil, fmt.Errorf("probe: class %q: %w", cl.Name, err)
		}
		r.ia = ia
	}
	if cl.Arrival.Process == config.ArrivalReplay && len(o.replay) == 0 {
		return nil, fmt.Errorf("probe: class %q: replay with no entries", cl.Name)
	}
	if len(o.replay) > 0 {
		if o.replaySpeed == 0 {
			r.o.replaySpeed = 1
		}
		if !(r.o.replaySpeed > 0) || math.IsInf(r.o.replaySpeed, 0) {
			return nil, fmt.Errorf("probe: class %q: replay speed %v must be > 0", cl.Name, o.replaySpeed)
		}
		if o.replayLoop && o.replay[len(o.replay)-1].At <= 0 {
			// Every pass would start at once: a flood at the rate cap.
			return nil, fmt.Errorf("probe: class %q: a looped replay needs a trace that spans some time; all %d entries are at one instant", cl.Name, len(o.replay))
		}
	}
	if j := cl.Job; j != nil {
		if j.Requests <= 0 {
			return nil, fmt.Errorf("probe: class %q: job.requests must be > 0", cl.Name)
		}
		r.jobs = &jobQueue{class: cl.Name, size: j.Requests, deadline: j.Deadline.Duration}
	}
	return r, nil
}

// MaxRequestBytes is the cap on this class's request bodies: its largest
// prompt at a generous bytes-per-token bound, and never above the absolute
// cap. Prompts are cut to fit it whatever a calibration says.
func (r *Runner) MaxRequestBytes() int { return r.maxBody }

// InFlight is the number of requests currently being streamed.
func (r *Runner) InFlight() int64 { return r.inFlight.Load() }

// Run sends the class's traffic until ctx is done, then cancels its
// in-flight requests and waits for them, handing emit every observation:
// each request Started, its FirstToken, its running GapReports, its Trace
// when it ends (those cut short end with ErrCancelled: the aggregator
// counts them as cancelled, not as failures), and a Notice for each
// decision taken from what the server said. Run returns nil when ctx ends
// it. A nil emit keeps the sink and callbacks the runner was built with
// (this package's tests).
func (r *Runner) Run(ctx context.Context, emit func(observe.Event)) error {
	r.emitTo(emit)
	if r.sink == nil {
		return errors.New("probe: a runner needs somewhere to emit its traces")
	}
	return r.run(ctx)
}

// emitTo routes every observation to emit.
func (r *Runner) emitTo(emit func(observe.Event)) {
	if emit == nil {
		return
	}
	r.sink = func(t *observe.Trace) { emit(t) }
	r.o.OnStarted = func(st observe.Started) { emit(&st) }
	r.o.OnFirstToken = func(ft observe.FirstToken) { emit(&ft) }
	r.o.OnGaps = func(g observe.GapReport) { emit(&g) }
	r.o.OnNotice = func(text string) { emit(&observe.Notice{At: time.Now(), Source: "probe", Text: text}) }
}

func (r *Runner) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	if len(r.o.replay) > 0 {
		r.replay(ctx, &wg)
		return nil
	}
	if r.ia == nil {
		for i := 0; i < r.cl.Arrival.N; i++ {
			wg.Go(func() { r.closedLoop(ctx) })
		}
		<-ctx.Done()
		return nil
	}
	arng := rand.New(rand.NewPCG(uint64(r.o.Seed), 0x617272697661))
	sem := make(chan struct{}, r.o.maxInFlight)
	next := time.Now()
	for first := true; ; first = false {
		// The first request goes at the start, the next ones one
		// interarrival after another: at a probe-sized rate (the default
		// batch class sends one every 50 s) a short run would otherwise
		// see nothing of the class.
		if !first {
			next = next.Add(r.ia(arng))
		}
		if !sleepUntil(ctx, next) {
			return nil
		}
		if next.Before(r.heldUntil()) {
			continue
		}
		if r.paused(next) {
			r.throttled(next)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if !sleepUntil(ctx, r.limit.reserve(time.Now())) {
			<-sem
			return nil
		}
		w := r.nextWork(time.Now())
		intended := next
		wg.Go(func() {
			defer func() { <-sem }()
			r.do(ctx, w, intended)
		})
	}
}

// RunOnce sends one request of the class to each target (the direct path,
// and the gateway when there is one), at once, and returns when they have
// ended: a spot check of the server (`--once`). Batch classes send a lone
// request, not a job, and nothing is retried. Cancelling ctx cuts the
// requests short.
func (r *Runner) RunOnce(ctx context.Context, emit func(observe.Event)) {
	r.emitTo(emit)
	if r.sink == nil {
		return
	}
	var wg sync.WaitGroup
	now := time.Now()
	for range r.o.Targets {
		p, n, words := r.newPrompt(0)
		w := work{prompt: p, promptTokens: n, promptWords: words, single: true}
		wg.Go(func() { r.do(ctx, w, now) })
	}
	wg.Wait()
}

// replay sends the recorded arrivals on their schedule, with the same
// pause, concurrency and rate caps as an open-loop process.
func (r *Runner) replay(ctx context.Context, wg *sync.WaitGroup) {
	sem := make(chan struct{}, r.o.maxInFlight)
	start := time.Now()
	for {
		for _, e := range r.o.replay {
			intended := start.Add(time.Duration(float64(e.At) / r.o.replaySpeed))
			if !sleepUntil(ctx, intended) {
				return
			}
			if intended.Before(r.heldUntil()) {
				continue
			}
			if r.paused(intended) {
				r.throttled(intended)
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if !sleepUntil(ctx, r.limit.reserve(time.Now())) {
				<-sem
				return
			}
			w := r.nextWorkSized(time.Now(), e.PromptTokens, e.OutputTokens)
			wg.Go(func() {
				defer func() { <-sem }()
				r.do(ctx, w, intended)
			})
		}
		if !r.o.replayLoop {
			<-ctx.Done()
			return
		}
		last := r.o.replay[len(r.o.replay)-1].At
		// The next pass starts one mean gap after the last entry.
		gap := last / time.Duration(len(r.o.replay))
		start = start.Add(time.Duration(float64(last+gap) / r.o.replaySpeed))
	}
}

func (r *Runner) closedLoop(ctx context.Context) {
	var backoff time.Duration
	for ctx.Err() == nil {
		now := time.Now()
		till := r.pausedUntil()
		if h := r.heldUntil(); h.After(till) {
			till = h
		}
		if now.Before(till) {
			if !sleepUntil(ctx, till) {
				return
			}
			continue
		}
		// The worker was ready now: time spent held by the rate cap is
		// client-side queueing and must show as such.
		if !sleepUntil(ctx, r.limit.reserve(now)) {
			return
		}
		// A closed loop against a server that fails at once would spin:
		// back off on failures, reset on success.
		if failed := r.do(ctx, r.nextWork(time.Now()), now); failed {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			if !sleepUntil(ctx, time.Now().Add(backoff)) {
				return
			}
		} else {
			backoff = 0
		}
	}
}

// do sends one request and hands its trace to the sink; failed reports an
// error other than a cancellation.
func (r *Runner) do(ctx context.Context, w work, intended time.Time) (failed bool) {
	seq := r.seq.Add(1) - 1
	req := &Request{
		Target:        r.o.Targets[seq%uint64(len(r.o.Targets))],
		Class:         r.cl.Name,
		Kind:          r.cl.Kind,
		API:           r.cl.API,
		Model:         r.o.Model,
		Priority:      r.cl.Priority,
		Prompt:        w.prompt,
		PromptTokens:  w.promptTokens,
		MaxTokens:     cmp.Or(w.maxTokens, r.cl.MaxTokens),
		IntendedStart: intended,
		JobID:         w.jobID,
		JobSize:       w.jobSize,
		JobIndex:      w.jobIndex,
		Attempt:       w.attempt,
		Deadline:      w.deadline,
		Validate:      r.o.validate,
		OnStarted:     r.o.OnStarted,
		OnFirstToken:  r.o.OnFirstToken,
		OnGaps:        r.o.OnGaps,
	}
	if !sleepUntil(ctx, r.tpm.reserveN(time.Now(), req.PromptTokens+req.MaxTokens)) {
		r.sink(&observe.Trace{Class: req.Class, Kind: req.Kind, Path: req.Target.Path, API: req.API, Model: req.Model,
			IntendedStart: intended, JobID: req.JobID, JobSize: req.JobSize, JobIndex: req.JobIndex, Attempt: req.Attempt, Deadline: req.Deadline,
			PromptTokensTarget: req.PromptTokens, MaxTokens: req.MaxTokens, PreambleBytes: -1,
			End: time.Now(), Err: &observe.Error{Kind: observe.ErrCancelled, Msg: "stopped while held by the tokens-per-minute cap"}})
		return false
	}
	tr := new(observe.Trace)
	r.inFlight.Add(1)
	r.s.streamTo(ctx, req, tr)
	r.inFlight.Add(-1)
	now := time.Now()
	if tr.Usage != nil && (r.o.Calibration == nil || r.o.Calibration.Source == "") {
		if msg := r.learned.observe(w.promptWords, tr.Usage.PromptTokens); msg != "" && r.o.OnNotice != nil {
			r.o.OnNotice("class " + r.cl.Name + ": " + msg)
		}
	}
	if tr.RetryAfter > 0 {
		r.pause(now.Add(tr.RetryAfter))
	}
	if r.jobs != nil && !w.single && !tr.Valid && retryable(tr) && w.attempt+1 < maxAttempts {
		wait := r.backoff(w.attempt, tr.RetryAfter)
		if w.deadline.IsZero() || now.Add(wait).Before(w.deadline) {
			w.attempt++
			r.jobs.push(w, now.Add(wait))
			tr.WillRetry = true
		}
	}
	failed = tr.Err != nil && tr.Err.Kind != observe.ErrCancelled
	r.sink(tr)
	return failed
}

// InFlight is the source of the requests in flight: every interval it
// emits how many requests of each runner's class are sent and not ended.
type InFlight struct {
	Runners []*Runner
	Every   time.Duration
}

// Run emits an observe.InFlight every i.Every until ctx is done.
func (i InFlight) Run(ctx context.Context, emit func(observe.Event)) error {
	if i.Every <= 0 {
		return errors.New("probe: in-flight interval must be positive")
	}
	t := time.NewTicker(i.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			counts := make(map[string]int64, len(i.Runners))
			for _, r := range i.Runners {
				counts[r.cl.Name] = r.InFlight()
			}
			emit(&observe.InFlight{Counts: counts})
		}
	}
}
