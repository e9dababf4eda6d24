package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokentop/tokentop/observe"
)

// The credentials the runs below carry: distinctive, so that a bytes
// search finds any copy, whichever code wrote it.
const (
	leakUser = "ttuser-Kx9q"
	leakPass = "pw-Zq7xLEAKvLk4"
	leakKey  = "sk-KEY-9fJ2mQ7rT"
)

// credentialServer is an OpenAI-compatible server, written for this test,
// whose every answer makes tokentop quote the URL it asked: /tokenize
// answers an event stream, /props redirects to another origin, the other
// discovery URLs fail, /metrics answers an HTML page (echoing the request's
// Authorization, as some gateways' error pages do), and once it has
// streamed for a while it stops listening, so that every request and
// scrape after that is refused.
type credentialServer struct {
	srv         *httptest.Server
	completions atomic.Int64
	dieOnce     sync.Once
	dieAfter    time.Duration
}

func startCredentialServer(t *testing.T, dieAfter time.Duration) *credentialServer {
	t.Helper()
	s := &credentialServer{dieAfter: dieAfter}
	// Started once s.srv is set: the handler reads it.
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Start()
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// url is the server's base URL with the test's userinfo.
func (s *credentialServer) url() string {
	return strings.Replace(s.srv.URL, "http://", "http://"+leakUser+":"+leakPass+"@", 1)
}

func (s *credentialServer) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"cred-model","object":"model"}]}`)
	case r.URL.Path == "/tokenize":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n")
	case r.URL.Path == "/props":
		// Another origin, the userinfo kept in the Location.
		http.Redirect(w, r, "http://"+leakUser+":"+leakPass+"@127.0.0.2:1/props", http.StatusFound)
	case r.URL.Path == "/metrics":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><body>sign in again (%s)</body></html>\n", r.Header.Get("Authorization"))
	case strings.HasSuffix(r.URL.Path, "/completions"):
		n := s.completions.Add(1)
		if n == 1 {
			time.AfterFunc(s.dieAfter, func() {
				s.dieOnce.Do(func() {
					s.srv.Listener.Close()
					s.srv.CloseClientConnections()
				})
			})
		}
		if n%3 == 0 {
			// A gateway's error page that echoes the request's headers.
			http.Error(w, "upstream failed for "+r.Header.Get("Authorization"), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range 6 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"text\":\"w%d \",\"finish_reason\":null}]}\n\n", i, i)
			fl.Flush()
			time.Sleep(5 * time.Millisecond)
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":6}}\n\ndata: [DONE]\n\n")
	default:
		http.Error(w, "no such endpoint ("+r.Header.Get("Authorization")+")", http.StatusInternalServerError)
	}
}

// refusedURL is a URL on loopback where nothing listens, with the test's
// userinfo.
func refusedURL(t *testing.T, path string) string {
	t.Helper()
	return "http://" + leakUser + ":" + leakPass + "@" + freeAddr(t) + path
}

// otlpSink is an OTLP/HTTP receiver that keeps every byte it is sent.
type otlpSink struct {
	mu   sync.Mutex
	data []byte
}

func (o *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	o.mu.Lock()
	o.data = append(o.data, b...)
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (o *otlpSink) bytes() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.data)
}

// leaked names the credentials data holds.
func leaked(data []byte) []string {
	var out []string
	basic := base64.StdEncoding.EncodeToString([]byte(leakUser + ":" + leakPass))
	for _, s := range []struct{ name, v string }{{"the URL's user", leakUser}, {"the URL's password", leakPass}, {"the API key", leakKey},
		{"the URL's userinfo as basic auth", basic}} {
		if bytes.Contains(data, []byte(s.v)) {
			out = append(out, s.name)
		}
	}
	return out
}

func checkNoCredential(t *testing.T, what string, data []byte) {
	t.Helper()
	if l := leaked(data); len(l) > 0 {
		t.Errorf("%s holds %s:\n%s", what, strings.Join(l, ", "), data)
	}
}

// outputFile is a file a run wrote, and what it must hold to show the run
// met what it was built to show.
type outputFile struct{ name, path, want string }

// checkOutputFiles fails for a file that is missing, holds a credential or
// lacks what it must hold.
func checkOutputFiles(t *testing.T, code int, stderr *bytes.Buffer, files []outputFile) {
	t.Helper()
	for _, f := range files {
		data, err := os.ReadFile(f.path)
		if err != nil {
			t.Errorf("exit %d, %s not written: %v\n%s", code, f.name, err, stderr.String())
			continue
		}
		checkNoCredential(t, f.name, data)
		if !bytes.Contains(data, []byte(f.want)) {
			t.Errorf("%s lacks %s:\n%s", f.name, f.want, data)
		}
	}
}

func keyEnv(stdout, stderr *bytes.Buffer) env {
	e := testEnv(stdout, stderr)
	e.Getenv = func(name string) string {
		if name == "TT_KEY" {
			return leakKey
		}
		return ""
	}
	return e
}

// TestNoCredentialInAnyOutput runs `tokentop watch` with a user and
// password in every URL and an API key, against a server that makes
// tokentop quote those URLs (a tokenize endpoint that streams, discovery
// that fails or redirects away, a /metrics that is an HTML page, a gateway
// and a /metrics that refuse connections, a server that stops listening
// mid-run), and searches every output for the credentials' bytes: both
// reports, the recording, the traces, stdout, stderr, the --listen-metrics
// exporter, what the OTLP collector received, and the console under tmux.
func TestNoCredentialInAnyOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("runs tokentop for a few seconds against a failing server")
	}
	t.Parallel()

	t.Run("report, recording, traces, exporter, OTLP", func(t *testing.T) {
		t.Parallel()
		srv := startCredentialServer(t, 2500*time.Millisecond)
		sink := &otlpSink{}
		rcv := httptest.NewServer(sink)
		defer rcv.Close()
		dir := t.TempDir()
		rep, traces, rec := filepath.Join(dir, "r.json"), filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "rec.jsonl")
		addr := freeAddr(t)
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(context.Background(), keyEnv(&stdout, &stderr), []string{"watch", "--target", srv.url(),
				"--gateway", refusedURL(t, ""), "--api-key-env", "TT_KEY", "--headless", "--duration", "5s",
				"--report", rep, "--format", "json", "--trace-out", traces, "--record", rec, "--listen-metrics", addr,
				"--otlp-endpoint", strings.Replace(rcv.URL, "http://", "http://"+leakUser+":"+leakPass+"@", 1)})
		}()
		// The exporter once requests have failed, before the run ends.
		time.Sleep(4 * time.Second)
		exported := getText(t, "http://"+addr+"/metrics")
		code := <-done
		if !strings.Contains(exported, "tokentop_requests_total") {
			t.Errorf("the exporter served no tokentop_requests_total:\n%s", exported)
		}
		checkNoCredential(t, "--listen-metrics", []byte(exported))
		checkNoCredential(t, "stdout", stdout.Bytes())
		checkNoCredential(t, "stderr", stderr.Bytes())
		checkNoCredential(t, "the OTLP export", sink.bytes())
		if len(sink.bytes()) == 0 {
			t.Error("the collector received no spans")
		}
		checkOutputFiles(t, code, &stderr, []outputFile{
			{"--report (JSON)", rep, "tokenize"}, {"--trace-out", traces, `"error"`}, {"--record", rec, `"k":"notice"`},
		})
	})

	t.Run("Markdown report, refused /metrics, basic auth", func(t *testing.T) {
		t.Parallel()
		// No API key: net/http sends the URL's userinfo as basic auth,
		// which the server's error pages echo.
		srv := startCredentialServer(t, 2500*time.Millisecond)
		dir := t.TempDir()
		rep, traces, rec := filepath.Join(dir, "r.md"), filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "rec.jsonl")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--target", srv.url(),
			"--metrics", refusedURL(t, "/metrics"), "--headless", "--duration", "4s",
			"--report", rep, "--format", "markdown", "--trace-out", traces, "--record", rec})
		checkNoCredential(t, "stdout", stdout.Bytes())
		checkNoCredential(t, "stderr", stderr.Bytes())
		checkOutputFiles(t, code, &stderr, []outputFile{
			{"--report (Markdown)", rep, "redacted@"}, {"--trace-out", traces, "upstream failed"}, {"--record", rec, "upstream failed"},
		})
	})

	t.Run("an unreachable target", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), keyEnv(&stdout, &stderr), []string{"watch", "--target", refusedURL(t, "/v1"),
			"--api-key-env", "TT_KEY", "--headless", "--duration", "2s"})
		if code == 0 || !strings.Contains(stderr.String(), "unreachable") {
			t.Errorf("exit %d, stderr %q: want the target named unreachable", code, stderr.String())
		}
		checkNoCredential(t, "stderr", stderr.Bytes())
		checkNoCredential(t, "stdout", stdout.Bytes())
	})

	t.Run("console under tmux", func(t *testing.T) {
		t.Parallel()
		needTmux(t)
		bin := buildBinary(t)
		srv := startCredentialServer(t, 2*time.Second)
		errFile := filepath.Join(t.TempDir(), "stderr")
		p := startPane(t, "tokentop-test-credentials", 160, 48,
			"TT_KEY="+leakKey+" "+bin+" watch --target "+srv.url()+" --gateway "+refusedURL(t, "")+
				" --metrics "+refusedURL(t, "/metrics")+" --api-key-env TT_KEY --no-color 2>"+errFile+"; echo EXITED:$?; sleep 30")
		screen, _ := p.waitFor(20*time.Second, showing("elapsed 3s"))
		checkNoCredential(t, "the console", []byte(screen))
		if !strings.Contains(screen, "redacted@") {
			t.Errorf("the console does not name its target:\n%s", screen)
		}
		// The server panel quotes the scrape's last error.
		p.keys("m")
		screen, ok := p.waitFor(5*time.Second, showing("last error"))
		checkNoCredential(t, "the server panel", []byte(screen))
		if !ok {
			t.Errorf("the server panel shows no scrape error:\n%s", screen)
		}
		p.keys("Escape")
		time.Sleep(300 * time.Millisecond)
		p.keys("s")
		time.Sleep(600 * time.Millisecond)
		checkNoCredential(t, "the slowest requests", []byte(p.screen()))
		screen = p.quit()
		checkNoCredential(t, "the terminal after quitting", []byte(screen))
		if data, err := os.ReadFile(errFile); err == nil {
			checkNoCredential(t, "the console's stderr", data)
		}
	})
}

// nopCloser makes a buffer a trace file.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestSessionScrubsWhatEntersTheEventStream: text that reaches the session
// with a credential in it, whichever code built it, leaves the session
// without: events on their way to the aggregator (and so to reports,
// recordings and the console), --trace-out, stderr and the run's error.
func TestSessionScrubsWhatEntersTheEventStream(t *testing.T) {
	spec := sessionSpec{apiKey: leakKey}
	spec.cfg.Target = "http://" + leakUser + ":" + leakPass + "@127.0.0.1:1/v1"
	scrub := sessionScrubber(spec)
	var traceOut, stderr bytes.Buffer
	s := &session{e: env{Stderr: scrub.Writer(&stderr)}, scrub: scrub, events: make(chan observe.Event, 8),
		pipeDone: make(chan struct{}), timebase: observe.NewTimebase(time.Now()), traces: newTraceWriter(nopCloser{&traceOut})}
	s.send(&observe.Notice{Source: "probe", Text: "calibration: " + leakPass + " and " + leakKey})
	s.emit(&observe.Trace{ID: "t1", Class: "interactive", Err: &observe.Error{Kind: observe.ErrConnect,
		Msg: `Post "http://` + leakUser + `:***@127.0.0.1:1/v1/completions": refused`, Body: "echo: Bearer " + leakKey}})
	close(s.events)
	for ev := range s.events {
		b, _ := json.Marshal(ev)
		checkNoCredential(t, "an event", b)
	}
	if err := s.traces.Close(); err != nil {
		t.Fatal(err)
	}
	checkNoCredential(t, "--trace-out", traceOut.Bytes())
	if !bytes.Contains(traceOut.Bytes(), []byte("redacted@")) {
		t.Errorf("the trace lost its message: %s", traceOut.Bytes())
	}

	ctx, stop := context.WithCancel(context.Background())
	s.srcCtx = ctx
	s.goSource("probe", sourceFunc(func(context.Context, func(observe.Event)) error {
		return fmt.Errorf("dial %s: %s", spec.cfg.Target, leakKey)
	}))
	s.sources.Wait()
	stop()
	checkNoCredential(t, "stderr", stderr.Bytes())
	if !strings.Contains(stderr.String(), "probe stopped") {
		t.Errorf("stderr %q", stderr.String())
	}
	err := scrub.Error(usagef("--target %s: %s", spec.cfg.Target, leakPass))
	checkNoCredential(t, "the run's error", []byte(err.Error()))
	if !errors.As(err, new(usageError)) {
		t.Error("a scrubbed usage error is no longer a usage error (exit 2)")
	}
}

// TestFleetNoCredential: `tokentop fleet` with a user and password in the
// engine's URL and a token: neither the report (JSON and Markdown) nor
// stderr holds them, whether the engine answers or refuses connections.
func TestFleetNoCredential(t *testing.T) {
	t.Parallel()
	withUser := func(u string) string {
		return strings.Replace(u, "http://", "http://"+leakUser+":"+leakPass+"@", 1)
	}
	for _, c := range []struct {
		name, url, format string
	}{
		{"an engine that answers, JSON", withUser(fakePrometheus(t)), "json"},
		{"an engine that answers, Markdown", withUser(fakePrometheus(t)), "markdown"},
		{"an engine that refuses", refusedURL(t, ""), "json"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), keyEnv(&stdout, &stderr), []string{"fleet", "--prometheus", c.url, "--api-key-env", "TT_KEY",
			"--headless", "--format", c.format})
		checkNoCredential(t, c.name+": the report", stdout.Bytes())
		checkNoCredential(t, c.name+": stderr", stderr.Bytes())
		if !bytes.Contains(stdout.Bytes(), []byte("redacted@")) && !bytes.Contains(stderr.Bytes(), []byte("redacted@")) {
			t.Errorf("%s: exit %d, the engine's URL is named nowhere:\n%s\n%s", c.name, code, stdout.Bytes(), stderr.Bytes())
		}
	}
}
