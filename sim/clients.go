package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentop/tokentop/sim/engine"
)

// The background clients are the simulator's background load as real HTTP
// clients of its own API (Knobs.BackgroundClients): every simulated user's
// stream crosses loopback, where a packet capture (tokentop demo --capture)
// sees it, instead of being a sequence the engine enqueues itself. The
// engine counts each of them once, as an API request: once its warm-up is
// over it enqueues no background work of its own.

// maxBackgroundUsers bounds the interactive users in flight at once (an
// overloaded scenario's queue grows without end); an arrival beyond it is
// counted in BackgroundStats.Dropped and not sent.
const maxBackgroundUsers = 4096

// backgroundPoll is how often the clients look at the knobs (rate and
// worker count changes, the warm-up's batch sequences finishing).
const backgroundPoll = 100 * time.Millisecond

// BackgroundStats counts the background clients' requests.
type BackgroundStats struct {
	Sent      int64 // requests sent
	Completed int64 // answered 200 and read to the end of the stream
	Failed    int64 // any other answer, or a stream cut short
	Dropped   int64 // interactive arrivals not sent: maxBackgroundUsers in flight
	InFlight  int64
}

type backgroundCounts struct {
	sent, completed, failed, dropped, inFlight atomic.Int64
}

// BackgroundStats returns the background clients' counts so far.
func (s *Server) BackgroundStats() BackgroundStats {
	return BackgroundStats{Sent: s.bg.sent.Load(), Completed: s.bg.completed.Load(), Failed: s.bg.failed.Load(),
		Dropped: s.bg.dropped.Load(), InFlight: s.bg.inFlight.Load()}
}

// RunBackgroundClients sends the background load to the server at base
// (its own address, e.g. http://127.0.0.1:8000) until ctx ends, then waits
// for every client to stop. Interactive users arrive as the engine's own
// would (Poisson at BackgroundInteractiveRPS, with bursts), each streaming
// one chat completion; BackgroundBatchConcurrency closed-loop workers
// stream completions one after another at the batch priority, taking over
// the slots of the warm-up's batch sequences as those finish. Lengths are
// drawn as the engine draws its own, and sent with ignore_eos so that the
// server generates exactly the drawn output. Knob changes are followed as
// they come. The server's faults apply to these requests as to any client's.
func (s *Server) RunBackgroundClients(ctx context.Context, base string) error {
	if !s.Knobs().BackgroundClients {
		return errors.New("sim: background clients need the background-clients knob")
	}
	base = strings.TrimSuffix(base, "/")
	tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: maxBackgroundUsers, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	bc := &backgroundClients{s: s, base: base, client: &http.Client{Transport: tr}}
	var wg sync.WaitGroup
	wg.Go(func() { bc.interactive(ctx, &wg) })
	bc.batch(ctx, &wg)
	wg.Wait()
	return nil
}

type backgroundClients struct {
	s      *Server
	base   string
	client *http.Client
}

// lognormal draws a length as the engine does: the median times
// exp(sigma·N(0,1)), clamped to [lo, hi].
func lognormal(rng *rand.Rand, sigma float64, median, lo, hi int) int {
	v := int(math.Round(float64(median) * math.Exp(sigma*rng.NormFloat64())))
	return min(max(v, lo), hi)
}

// interactive sends the users' requests as they arrive, each from a
// goroutine of its own that wg waits for.
func (bc *backgroundClients) interactive(ctx context.Context, wg *sync.WaitGroup) {
	k := bc.s.Knobs()
	rng := rand.New(rand.NewPCG(uint64(k.Seed), 0xb4c1))
	gap := func(now time.Time, k Knobs) time.Time {
		r := engine.BackgroundRate(k, bc.s.start, now.UnixNano())
		if r <= 0 {
			return time.Time{}
		}
		return now.Add(time.Duration(rng.ExpFloat64() / r * 1e9))
	}
	next := gap(time.Now(), k)
	t := time.NewTimer(backgroundPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		nk := bc.s.Knobs()
		if nk.BackgroundInteractiveRPS != k.BackgroundInteractiveRPS || next.IsZero() {
			next = gap(now, nk) // a new rate: redrawn, as the engine does
		}
		k = nk
		for !next.IsZero() && !next.After(now) {
			at := next
			out := lognormal(rng, k.OutputLengthSigma, k.BackgroundOutputTokens, 1, k.MaxModelLen-1)
			in := lognormal(rng, k.OutputLengthSigma, k.BackgroundPromptTokens, 1, k.MaxModelLen-out)
			if bc.s.bg.inFlight.Load() >= maxBackgroundUsers {
				bc.s.bg.dropped.Add(1)
			} else {
				body := bc.body(k.Model, true, in, out, 0)
				wg.Go(func() { bc.send(ctx, "/v1/chat/completions", body) })
			}
			next = gap(at, k)
		}
		wait := backgroundPoll
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		t.Reset(wait)
	}
}

// batch keeps BackgroundBatchConcurrency workers streaming, less the
// engine's own batch sequences still in flight from its warm-up; a worker
// beyond the count stops after its request.
func (bc *backgroundClients) batch(ctx context.Context, wg *sync.WaitGroup) {
	var (
		mu    sync.Mutex
		slots []bool // a worker runs in slot i
	)
	var want atomic.Int64
	t := time.NewTicker(backgroundPoll)
	defer t.Stop()
	seed := bc.s.Knobs().Seed
	for {
		k := bc.s.Knobs()
		want.Store(int64(max(0, k.BackgroundBatchConcurrency-bc.s.State().BackgroundBatch)))
		mu.Lock()
		for i := range int(want.Load()) {
			if i == len(slots) {
				slots = append(slots, false)
			}
			if slots[i] {
				continue
			}
			slots[i] = true
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)<<8|0xba))
			wg.Go(func() {
				defer func() {
					mu.Lock()
					slots[i] = false
					mu.Unlock()
				}()
				for ctx.Err() == nil && int64(i) < want.Load() {
					k := bc.s.Knobs()
					out := lognormal(rng, k.OutputLengthSigma, k.BackgroundBatchOutputTokens, 1, k.MaxModelLen-1)
					in := lognormal(rng, k.OutputLengthSigma, k.BackgroundBatchPromptTokens, 1, k.MaxModelLen-out)
					if pause := bc.send(ctx, "/v1/completions", bc.body(k.Model, false, in, out, engine.BackgroundBatchPriority)); pause > 0 {
						// Refused or failed: a closed-loop worker waits
						// before its next try, as a real one would.
						t := time.NewTimer(pause)
						select {
						case <-ctx.Done():
						case <-t.C:
						}
						t.Stop()
					}
				}
			})
		}
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// body is a streaming request of in prompt words for exactly out tokens.
func (bc *backgroundClients) body(model string, chat bool, in, out, priority int) []byte {
	b := make([]byte, 0, 2*in+192)
	b = append(b, `{"model":`...)
	b = strconv.AppendQuote(b, model)
	if chat {
		b = append(b, `,"messages":[{"role":"user","content":"`...)
		b = appendWords(b, in)
		b = append(b, `"}]`...)
	} else {
		b = append(b, `,"prompt":"`...)
		b = appendWords(b, in)
		b = append(b, '"')
	}
	b = fmt.Appendf(b, `,"max_tokens":%d,"ignore_eos":true,"priority":%d,"stream":true,"stream_options":{"include_usage":true}}`, out, priority)
	return b
}

// appendWords appends a prompt of n words: the simulator counts a prompt's
// tokens as its words.
func appendWords(b []byte, n int) []byte {
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, 'w')
	}
	return b
}

// send streams one request and reads its answer to the end. It returns how
// long a closed-loop client should wait before its next request: 0 after
// a complete stream, the Retry-After of a refusal, else a short pause.
func (bc *backgroundClients) send(ctx context.Context, path string, body []byte) time.Duration {
	bc.s.bg.sent.Add(1)
	bc.s.bg.inFlight.Add(1)
	defer bc.s.bg.inFlight.Add(-1)
	const failPause = 100 * time.Millisecond
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bc.base+path, bytes.NewReader(body))
	if err != nil {
		bc.s.bg.failed.Add(1)
		return failPause
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := bc.client.Do(req)
	if err != nil {
		bc.s.bg.failed.Add(1)
		return failPause
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode == http.StatusOK && err == nil {
		bc.s.bg.completed.Add(1)
		return 0
	}
	bc.s.bg.failed.Add(1)
	if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
		return time.Duration(min(s, 60)) * time.Second
	}
	return failPause
}
