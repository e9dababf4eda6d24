// Package sim owns tokentop's simulated inference server: a continuous-
// batching engine modelled on vLLM's scheduler (waiting queue, running batch,
// per-step token budget, paged KV cache with preemption, optional chunked
// prefill and priority scheduling), built-in background load, an
// OpenAI-compatible HTTP API that streams like vLLM, /metrics in the real
// names of several servers, fault injection, and a buffering reverse proxy.
// `tokentop demo`, `tokentop sim`, the integration tests and the benchmarks
// all run against it.
//
// Tokenization is by words: a prompt's token count is its number of
// whitespace-separated words, and every generated token is one short word.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokentop/tokentop/sim/engine"
)

// Server is one simulated inference server. Create it with New, serve its
// Handler, and call Run: requests only progress while Run runs.
type Server struct {
	// met is what /metrics reports; a restart (restart.go) swaps in a
	// fresh one, as a new process would count from zero.
	met atomic.Pointer[engine.Metrics]
	eng *engine.Engine // owned by the Run goroutine
	// ready is what the latest step gave direct streams (stream.Token,
	// on the Run goroutine); Run hands it to the delivery workers.
	ready []tokenNews
	epoch int64 // created, unix seconds (OpenAI "created")
	start int64 // created, unix ns: where the background bursts count from

	bg backgroundCounts // the background clients' requests (clients.go)

	mu           sync.Mutex
	knobs        Knobs
	knobsChanged bool
	inbox        []*engine.Seq
	closed       bool // Run has ended: nothing will serve the inbox
	state        EngineState

	wake    chan struct{}
	running atomic.Bool
	cancels atomic.Int64
	reqID   atomic.Uint64

	faultMu  sync.Mutex
	faultRng *rand.Rand

	// eventBufs lends the buffers SSE events are built in. A buffer per
	// stream would be cold memory by the next token when a thousand
	// streams take turns; a pooled one stays in this CPU's cache.
	eventBufs sync.Pool

	delivery *delivery    // writes direct streams while Run runs
	handoffs atomic.Int64 // direct streams a slow client sent back to their handler

	writeLog func(WriteRecord) // see WithWriteLog; nil: none

	down atomic.Bool // restarting: every request is dropped unanswered
}

// Option configures a Server.
type Option func(*Server)

// New builds a server with the given knobs.
func New(k Knobs, opts ...Option) (*Server, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	s := &Server{knobs: k, wake: make(chan struct{}, 1), delivery: newDelivery()}
	s.eventBufs.New = func() any {
		b := make([]byte, 0, 512)
		return &b
	}
	for _, o := range opts {
		o(s)
	}
	now := time.Now()
	s.epoch = now.Unix()
	s.start = now.UnixNano()
	warm := int64(k.WarmupS * 1e9)
	s.met.Store(engine.NewMetrics(k.MaxModelLen, float64(now.UnixNano()-warm)/1e9))
	s.eng = engine.NewEngine(k, s.met.Load(), now.UnixNano())
	s.publish(s.eng)
	s.faultRng = rand.New(rand.NewPCG(uint64(k.Seed), 0xfa017))
	return s, nil
}

// Knobs returns the knobs in force.
func (s *Server) Knobs() Knobs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.knobs
}

// SetKnobs changes knobs while the server runs. The engine picks the change
// up at its next step. MaxModelLen and BlockSize cannot change (an error);
// Seed and WarmupS only matter to a new server.
func (s *Server) SetKnobs(k Knobs) error {
	if err := k.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	if k.MaxModelLen != s.knobs.MaxModelLen || k.BlockSize != s.knobs.BlockSize || k.BackgroundClients != s.knobs.BackgroundClients {
		s.mu.Unlock()
		return errors.New("max-model-len, block-size and background-clients cannot change on a running server")
	}
	s.knobs = k
	s.knobsChanged = true
	s.mu.Unlock()
	s.poke()
	return nil
}

// State returns the engine's true state after its latest step.
func (s *Server) State() EngineState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// submit hands a request to the engine; false once the engine has stopped.
func (s *Server) submit(q *engine.Seq) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.inbox = append(s.inbox, q)
	s.mu.Unlock()
	s.poke()
	return true
}

// Run runs the engine loop and the background load until ctx is done. It
// may be called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("sim: Run called twice")
	}
	e := s.eng
	deliverCtx, stopDelivery := context.WithCancel(ctx)
	var workers sync.WaitGroup
	workers.Go(func() { s.delivery.run(deliverCtx) })
	defer func() {
		stopDelivery()
		workers.Wait()
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var inbox []*engine.Seq
	var rs restartState
	for {
		now := time.Now().UnixNano()
		s.mu.Lock()
		inbox, s.inbox = s.inbox, inbox[:0]
		if s.knobsChanged {
			e.SetKnobs(s.knobs)
			s.knobsChanged = false
		}
		s.mu.Unlock()
		for i, q := range inbox {
			e.Enqueue(q)
			inbox[i] = nil
		}
		if until := s.restartStep(&rs, e, now); until > 0 {
			// Down: nothing runs until the new process is up.
			timer.Reset(time.Duration(until - now))
			select {
			case <-ctx.Done():
				timer.Stop()
				s.shutdown(e)
				return nil
			case <-timer.C:
			}
			continue
		}
		if s.cancels.Swap(0) > 0 {
			e.DropCancelled()
		}
		dur := e.Schedule(now)
		s.publish(e)
		wait := dur
		if dur == 0 {
			wait = time.Hour
			if next := e.NextArrival(); next > 0 {
				wait = time.Duration(next - now)
			}
			if rs.next > 0 && time.Duration(rs.next-now) < wait {
				wait = time.Duration(max(rs.next-now, 0)) // an idle server crashes on time too
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			s.shutdown(e)
			return nil
		case <-timer.C:
			if dur > 0 {
				s.complete(e)
			}
		case <-s.wake:
			// New work while idle; a step in flight must still finish.
			if dur > 0 {
				select {
				case <-timer.C:
				case <-ctx.Done():
					s.shutdown(e)
					return nil
				}
				s.complete(e)
			} else if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// complete ends the engine's step now and hands new tokens on.
func (s *Server) complete(e *engine.Engine) {
	e.Complete(time.Now().UnixNano())
	s.delivery.post(s.ready)
	clear(s.ready)
	s.ready = s.ready[:0]
	s.publish(e)
}

func (s *Server) publish(e *engine.Engine) {
	st := e.State()
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
	s.met.Load().SetState(st)
}

// shutdown ends every open stream and rejects what arrives later.
func (s *Server) shutdown(e *engine.Engine) {
	s.mu.Lock()
	pending := s.inbox
	s.inbox = nil
	s.closed = true
	s.mu.Unlock()
	for _, q := range pending {
		e.Enqueue(q)
	}
	e.AbortAll()
	s.publish(e)
}

// Handler serves /v1/chat/completions, /v1/completions, /v1/models,
// /tokenize, /metrics, /health and /version.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, apiChat) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, apiCompletions) })
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("POST /tokenize", s.serveTokenize)
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "tokentop-sim " + Version})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			// Restarting (restart.go): no process answers; the connection
			// closes without a response.
			panic(http.ErrAbortHandler)
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	b := s.met.Load().Render(s.Knobs())
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(b)
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	k := s.Knobs()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": k.Model, "object": "model", "created": s.epoch, "owned_by": "vllm",
			"root": k.Model, "parent": nil, "max_model_len": k.MaxModelLen,
		}},
	})
}

func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s%032x", prefix, s.reqID.Add(1))
}
