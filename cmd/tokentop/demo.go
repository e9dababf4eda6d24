package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/sanitize"
	"github.com/tokentop/tokentop/sim"
)

// simFlags parses --scenario plus every simulator knob. A knob given on the
// command line overrides the scenario's preset, whatever the flag order.
type simFlags struct {
	scenario string
	hardware string
	knobs    sim.Knobs
}

func (s *simFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.scenario, "scenario", "healthy", "simulator scenario: "+fmt.Sprint(sim.ScenarioNames()))
	fs.StringVar(&s.hardware, "hardware", "default", "calibration preset of the simulated model and GPU: "+fmt.Sprint(sim.HardwareNames()))
	s.knobs = sim.DefaultKnobs()
	s.knobs.RegisterFlags(fs)
}

// resolve applies the hardware preset, then the scenario, then the knobs
// set explicitly on fs.
func (s *simFlags) resolve(fs *flag.FlagSet) (sim.Knobs, error) {
	k := sim.DefaultKnobs()
	if err := sim.Configure(&k, s.hardware, s.scenario); err != nil {
		return sim.Knobs{}, usageError{err}
	}
	apply := flag.NewFlagSet("knobs", flag.ContinueOnError)
	k.RegisterFlags(apply)
	var setErr error
	fs.Visit(func(f *flag.Flag) {
		if apply.Lookup(f.Name) != nil && setErr == nil {
			setErr = apply.Set(f.Name, f.Value.String())
		}
	})
	if setErr != nil {
		return sim.Knobs{}, usageError{setErr}
	}
	if err := k.Validate(); err != nil {
		return sim.Knobs{}, usageError{err}
	}
	return k, nil
}

// simStack is a running simulator (and optional buffering proxy) on loopback.
type simStack struct {
	srv     *sim.Server
	target  string
	gateway string
	stop    context.CancelFunc
	wg      sync.WaitGroup
	servers []*http.Server
	errs    chan error
}

// startSim starts the simulator engine and its HTTP server on addr, plus the
// buffering proxy on loopback when the knobs ask for one.
func startSim(ctx context.Context, k sim.Knobs, addr string) (*simStack, error) {
	srv, err := sim.New(k)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	st := &simStack{srv: srv, stop: cancel, target: "http://" + ln.Addr().String(), errs: make(chan error, 3)}
	st.serve(ln, srv.Handler(), srv.ConnContext) // token events go straight to the connection
	if k.ProxyBufferBytes > 0 {
		pln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("buffering proxy: %w", err)
		}
		up, _ := url.Parse(st.target)
		st.serve(pln, srv.Proxy(up), nil) // follows live changes of the proxy knobs
		st.gateway = "http://" + pln.Addr().String()
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			st.errs <- fmt.Errorf("simulator engine: %w", err)
		}
	}()
	if k.BackgroundClients {
		// The background users stream from this process to the
		// simulator's own port, straight (not through the proxy).
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			if err := srv.RunBackgroundClients(ctx, st.target); err != nil {
				st.errs <- fmt.Errorf("simulator background clients: %w", err)
			}
		}()
	}
	return st, nil
}

func (st *simStack) serve(ln net.Listener, h http.Handler, connContext func(context.Context, net.Conn) context.Context) {
	// The console owns the terminal: server logs would scribble over it.
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0), ConnContext: connContext}
	st.servers = append(st.servers, hs)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			st.errs <- err
		}
	}()
}

// Close stops the engine and the servers and waits for them.
func (st *simStack) Close() {
	st.stop()
	for _, hs := range st.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := hs.Shutdown(ctx); err != nil {
			hs.Close()
		}
		cancel()
	}
	st.wg.Wait()
}

// demoClasses sizes the demo's classes to the simulator's hardware preset.
// With the simulator's background users they make the scenario's load:
// most of the prompt work on a healthy server is theirs (see the header's
// footprint).
func demoClasses(cfg *config.Config, k sim.Knobs, loadScale float64) {
	cfg.Classes = config.Example() // the demo's scenarios are built around these
	if b := cfg.Class("batch"); b != nil && b.Kind == config.KindBatch {
		b.Arrival = config.Arrival{Process: config.ArrivalConcurrency, N: 4}
		b.Job = &config.Job{Requests: 40, Deadline: config.Duration{Duration: 2 * time.Minute}}
		b.MaxTokens = 120
		// Four workers at the time a token takes on this hardware when the
		// server is healthy (a step with ~24 sequences, plus ~40% for
		// prefill work and TTFT), failing once tokens take 2.5× that: 80
		// tokens/s on the default's ~20 ms a token. Tighter, and a busy
		// but healthy server (a few dozen long batch sequences) fails it.
		perToken := 1.4 * (k.DecodeStepMs + 24*k.DecodeMsPerSeq)
		tps := math.Round(4*1000/(2.5*perToken)/10) * 10
		b.SLO.OutputTokensPerS = &tps
	}
	// On slower hardware the probe's own interactive prompts would be a
	// large share of the server's prefill work: sample at a rate scaled
	// like the background load (never above the default's 2/s).
	if in := cfg.Class("interactive"); in != nil && in.Arrival.Process == config.ArrivalPoisson {
		in.Arrival.Rate *= min(loadScale, 1)
	}
	// The batch class's long prompts likewise: four workers of 1500-token
	// prompts take a tenth of the default's prefill capacity, and would take
	// a sixth of a 70B's.
	if b := cfg.Class("batch"); b != nil {
		s := min(loadScale, 1)
		b.PromptTokens.Median = max(1, int(float64(b.PromptTokens.Median)*s))
		b.PromptTokens.P95 = max(b.PromptTokens.Median, int(float64(b.PromptTokens.P95)*s))
	}
}

func runDemo(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var common commonFlags
	common.register(fs)
	var sf simFlags
	sf.register(fs)
	captureOn := fs.Bool("capture", false, "also measure every simulated user's stream from loopback's packets, as watch --capture does "+
		"(turns --background-clients on; needs CAP_NET_RAW; Linux)")
	if err := parseFlags(fs, args, e.Stderr); err != nil {
		return report.ExitUsage, err
	}
	if fs.NArg() > 0 {
		return report.ExitUsage, usagef("unexpected argument %q", fs.Arg(0))
	}
	knobs, err := sf.resolve(fs)
	if err != nil {
		return report.ExitUsage, err
	}
	var capture captureSpec
	if *captureOn {
		if flagSet(fs, "background-clients") && !knobs.BackgroundClients {
			return report.ExitUsage, usagef("--capture needs the background users as clients: drop --background-clients=false")
		}
		// Injected in the engine, the background users never cross the
		// network: as clients, every simulated user's stream does.
		knobs.BackgroundClients = true
		capture = captureSpec{on: true, iface: loopbackInterface()}
	}
	userConfig := common.configPath != ""
	cfg, err := common.finish(e)
	if err != nil {
		return report.ExitUsage, err
	}
	if !userConfig {
		demoClasses(&cfg, knobs, sim.LoadScale(sf.hardware))
		// The demo's classes are part of the simulated workload by design
		// (its scenarios are built around them: the batch class is the
		// interference in batch-interference): their share of the work is
		// shown in the header and the report, and not raised as a finding.
		cfg.FootprintBudget = 1
	}
	// The simulator outlives an interrupt: the session stops its probes
	// first (their requests end cancelled, by tokentop), then the deferred
	// Close stops the simulator. Stopped with the session's context, it
	// cut streams still in flight, and the report blamed the server for
	// them.
	stack, err := startSim(context.WithoutCancel(ctx), knobs, "127.0.0.1:0")
	if err != nil {
		return report.ExitNoData, err
	}
	defer stack.Close()
	cfg.Target, cfg.Gateway, cfg.Metrics = stack.target, stack.gateway, stack.target+"/metrics"
	cfg.Model = knobs.Model

	title := fmt.Sprintf("tokentop demo · scenario %s · target %s", sf.scenario, sanitize.URL(cfg.Target))
	if cfg.Gateway != "" {
		title += " · gateway " + sanitize.URL(cfg.Gateway)
	}
	code, err := runSession(ctx, e, sessionSpec{
		cfg:     cfg,
		common:  common,
		title:   title,
		knobs:   &simKnobs{srv: stack.srv},
		seed:    knobs.Seed,
		capture: capture,
	})
	select {
	case serr := <-stack.errs:
		if err == nil {
			err = serr
		}
	default:
	}
	return code, err
}

func runSim(ctx context.Context, e env, args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve the OpenAI-compatible API and /metrics on")
	var sf simFlags
	sf.register(fs)
	if err := parseFlags(fs, args, e.Stderr); err != nil {
		return err
	}
	knobs, err := sf.resolve(fs)
	if err != nil {
		return err
	}
	stack, err := startSim(ctx, knobs, *listen)
	if err != nil {
		return err
	}
	defer stack.Close()
	fmt.Fprintf(e.Stdout, "tokentop sim: scenario %s, model %s, serving %s (metrics %s/metrics)\n", sf.scenario, knobs.Model, stack.target, stack.target)
	if stack.gateway != "" {
		fmt.Fprintf(e.Stdout, "tokentop sim: buffering proxy at %s\n", stack.gateway)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-stack.errs:
		return err
	}
}
