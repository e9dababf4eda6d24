package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// evil is what a hostile server puts wherever it sends text: an OSC that
// retitles the terminal, a screen clear, a colour, a bidirectional
// override and a C1 CSI. Printed raw, it would repaint the console.
const evil = "m\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\u009b"

// hostileLLM is an OpenAI-compatible server written for this test on a raw
// TCP listener, so that it can send what net/http's server refuses to (a
// reason phrase with escape sequences). Every text it controls carries
// evil: the model id of /v1/models, the label values of /metrics and of a
// dcgm-exporter's /dcgm, the streams' model and finish_reason, the reason
// phrase and body of its 500s (every completions request) and 404s.
type hostileLLM struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startHostileLLM(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileLLM{ln: ln, conns: map[net.Conn]bool{}}
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		for c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

func (h *hostileLLM) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns[c] = true
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			defer func() {
				h.mu.Lock()
				delete(h.conns, c)
				h.mu.Unlock()
				c.Close()
			}()
			h.serve(c)
		}()
	}
}

// serve answers the requests of one keep-alive connection in turn.
func (h *hostileLLM) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(req.Body, 1<<20))
		req.Body.Close()
		if !h.answer(c, req) {
			return
		}
	}
}

// evilJSON is evil as a JSON string: a decoder hands back the raw bytes.
func evilJSON() string {
	b, _ := json.Marshal(evil)
	return string(b)
}

func (h *hostileLLM) answer(c net.Conn, req *http.Request) bool {
	switch req.URL.Path {
	case "/v1/models":
		return respond(c, "200 OK", "application/json", `{"object":"list","data":[{"id":`+evilJSON()+`,"object":"model","owned_by":`+evilJSON()+`}]}`)
	case "/metrics":
		l := `model_name="` + evil + `",engine="0"`
		return respond(c, "200 OK", "text/plain; version=0.0.4", "# TYPE vllm:num_requests_running gauge\n"+
			"vllm:num_requests_running{"+l+"} 1\n"+
			"vllm:num_requests_waiting{"+l+"} 0\n"+
			"vllm:kv_cache_usage_perc{"+l+"} 0.4\n"+
			"vllm:generation_tokens_total{"+l+"} 100\n"+
			"vllm:prompt_tokens_total{"+l+"} 300\n"+
			"vllm:num_requests_swapped{"+l+"} "+evil+"\n")
	case "/dcgm":
		l := `gpu="0",UUID="GPU-` + evil + `",modelName="H100` + evil + `",device="nvidia0"`
		return respond(c, "200 OK", "text/plain; version=0.0.4",
			"DCGM_FI_DEV_GPU_UTIL{"+l+"} 55\nDCGM_FI_DEV_FB_USED{"+l+"} 1000\nDCGM_FI_DEV_FB_FREE{"+l+"} 79000\n")
	case "/v1/chat/completions":
		return h.stream(c)
	case "/v1/completions":
		// Not at once: a closed-loop class would spin on instant errors.
		time.Sleep(50 * time.Millisecond)
		return respond(c, "500 Internal"+evil, "application/json", `{"error":{"message":"boom `+evil+`"}}`)
	}
	return respond(c, "404 Not Found"+evil, "text/plain", "no such path "+evil)
}

// respond writes one whole response with the status line it is given.
func respond(c net.Conn, status, ctype, body string) bool {
	_, err := fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", status, ctype, len(body), body)
	return err == nil
}

// stream writes a chat completion as SSE events in HTTP chunks, a few
// milliseconds apart: six tokens, the finish reason, usage, [DONE].
func (h *hostileLLM) stream(c net.Conn) bool {
	if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
		return false
	}
	event := func(data string) bool {
		ev := "data: " + data + "\n\n"
		_, err := fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
		return err == nil
	}
	m := evilJSON()
	for i := range 6 {
		if !event(fmt.Sprintf(`{"id":"c1","object":"chat.completion.chunk","model":%s,"choices":[{"index":0,"delta":{"content":"w%d "},"finish_reason":null}]}`, m, i)) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	ok := event(`{"id":"c1","object":"chat.completion.chunk","model":`+m+`,"choices":[{"index":0,"delta":{},"finish_reason":`+m+`}]}`) &&
		event(`{"id":"c1","object":"chat.completion.chunk","model":`+m+`,"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":6,"total_tokens":26}}`) &&
		event("[DONE]")
	if !ok {
		return false
	}
	_, err := io.WriteString(c, "0\r\n\r\n")
	return err == nil
}

// rawControl returns the first rune of s that a terminal acts on or that
// reorders or hides text (newlines and tabs allowed: output has lines and
// columns), or a byte of invalid UTF-8; false when there is none. It is
// written apart from the sanitize package, which it checks.
func rawControl(s string) (rune, bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return rune(s[i]), true
		case r == '\n', r == '\t':
		case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f,
			r >= 0x200b && r <= 0x200f, r >= 0x2028 && r <= 0x202e, r >= 0x2060 && r <= 0x2069,
			r == 0x061c, r == 0xfeff:
			return r, true
		}
		i += n
	}
	return 0, false
}

// checkText fails when text, what tokentop wrote somewhere, holds a raw
// control, and names the line.
func checkText(t *testing.T, what, text string) {
	t.Helper()
	for i, line := range strings.Split(text, "\n") {
		if r, bad := rawControl(line); bad {
			t.Errorf("%s line %d carries a raw %U: %q", what, i+1, r, line)
			return
		}
	}
}

// checkJSON fails unless data is JSON (one value, or one per line) whose
// every string, keys included, is free of raw controls.
func checkJSON(t *testing.T, what string, data []byte, lines bool) {
	t.Helper()
	docs := [][]byte{data}
	if lines {
		docs = bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	}
	for i, doc := range docs {
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			t.Errorf("%s (document %d) is not JSON: %v", what, i+1, err)
			return
		}
		var bad []string
		walkJSON(v, func(s string) {
			if r, ok := rawControl(s); ok && len(bad) < 3 {
				bad = append(bad, fmt.Sprintf("%U in %q", r, s))
			}
		})
		if len(bad) > 0 {
			t.Errorf("%s (document %d) carries raw controls: %s", what, i+1, strings.Join(bad, "; "))
			return
		}
	}
}

func walkJSON(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case []any:
		for _, x := range v {
			walkJSON(x, f)
		}
	case map[string]any:
		for k, x := range v {
			f(k)
			walkJSON(x, f)
		}
	}
}

// escapedEvil is how evil reads once made safe: its escapes spelt out.
const escapedEvil = `m\x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil\x9b`

func hostileConfig(t *testing.T, target string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hostile.yaml")
	cfg := "target: " + target + "\nmodel: auto\nclasses:\n" +
		"  - name: interactive\n    kind: interactive\n    api: chat\n    arrival: {process: poisson, rate: 4}\n" +
		"    prompt_tokens: {fixed: 20}\n    max_tokens: 6\n" +
		"  - name: batch\n    kind: batch\n    api: completions\n    job: {requests: 100, deadline: 1m}\n" +
		"    arrival: {process: concurrency, n: 1}\n    prompt_tokens: {fixed: 20}\n    max_tokens: 6\n"
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostileServerText: a server whose every text carries escape
// sequences and bidirectional overrides reaches none of tokentop's outputs
// raw: the console in a real terminal (tmux), stderr, `tokentop scrape`
// (text and JSON), the JSON and Markdown reports, --trace-out, --record
// and the --listen-metrics exporter. JSON outputs stay JSON.
func TestHostileServerText(t *testing.T) {
	if testing.Short() {
		t.Skip("runs tokentop against a hostile server for a few seconds")
	}
	t.Parallel()
	url := startHostileLLM(t)
	cfg := hostileConfig(t, url)

	t.Run("scrape", func(t *testing.T) {
		t.Parallel()
		for _, asJSON := range []bool{false, true} {
			var stdout, stderr bytes.Buffer
			args := []string{"scrape", url + "/metrics"}
			if asJSON {
				args = append(args, "--json")
			}
			code := run(context.Background(), testEnv(&stdout, &stderr), args)
			if code != 0 {
				t.Errorf("%v: exit %d\n%s", args, code, stderr.String())
			}
			checkText(t, "scrape stderr", stderr.String())
			if asJSON {
				checkJSON(t, "scrape --json", stdout.Bytes(), false)
			} else {
				checkText(t, "scrape", stdout.String())
			}
			if !strings.Contains(stdout.String(), "pwned") {
				t.Errorf("%v does not show the model (escaped):\n%s", args, stdout.String())
			}
		}
		// A path that answers 404 with a hostile reason phrase.
		var stdout, stderr bytes.Buffer
		run(context.Background(), testEnv(&stdout, &stderr), []string{"scrape", url + "/nothing"})
		checkText(t, "scrape error", stderr.String())
		if !strings.Contains(stderr.String(), "404") {
			t.Errorf("scrape of a 404 says %q", stderr.String())
		}
	})

	t.Run("userinfo in the target URL", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		withPass := strings.Replace(url, "http://", "http://tok:s3cretpw@", 1)
		outs := []string{filepath.Join(dir, "r.json"), filepath.Join(dir, "r.md"), filepath.Join(dir, "rec.jsonl")}
		for i, format := range []string{"json", "markdown"} {
			var stdout, stderr bytes.Buffer
			args := []string{"watch", "--config", cfg, "--target", withPass, "--headless", "--duration", "2s", "--report", outs[i], "--format", format}
			if i == 0 {
				args = append(args, "--record", outs[2])
			}
			run(context.Background(), testEnv(&stdout, &stderr), args)
			for _, out := range []string{stdout.String(), stderr.String()} {
				if strings.Contains(out, "s3cretpw") {
					t.Errorf("%s output carries the URL's password:\n%s", format, out)
				}
			}
		}
		for _, f := range outs {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte("s3cretpw")) || !bytes.Contains(data, []byte("redacted@")) {
				t.Errorf("%s: the URL's userinfo is not redacted", filepath.Base(f))
			}
		}
	})

	t.Run("headless JSON, traces, recording, exporter", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		rep, traces, rec := filepath.Join(dir, "r.json"), filepath.Join(dir, "t.jsonl"), filepath.Join(dir, "rec.jsonl")
		addr := freeAddr(t)
		var stdout, stderr bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--config", cfg, "--headless", "--duration", "4s",
				"--report", rep, "--format", "json", "--trace-out", traces, "--record", rec,
				"--listen-metrics", addr, "--gpu-metrics", url + "/dcgm"})
		}()
		// The exporter while the run goes on, once requests have ended.
		time.Sleep(2500 * time.Millisecond)
		exported := getText(t, "http://"+addr+"/metrics")
		code := <-done
		if !strings.Contains(exported, "tokentop_requests_total") {
			t.Errorf("the exporter served no tokentop_requests_total:\n%s", exported)
		}
		checkText(t, "--listen-metrics", exported)
		checkText(t, "stderr", stderr.String())
		checkText(t, "stdout", stdout.String())
		data, err := os.ReadFile(rep)
		if err != nil {
			t.Fatalf("exit %d, no report: %v\n%s", code, err, stderr.String())
		}
		checkJSON(t, "--report (JSON)", data, false)
		var r struct {
			Model string `json:"model"`
			GPU   struct {
				Devices []struct {
					Name string `json:"name"`
				} `json:"devices"`
			} `json:"gpu"`
			Classes map[string]struct {
				Requests int64 `json:"requests"`
			} `json:"classes"`
		}
		if err := json.Unmarshal(data, &r); err == nil {
			if r.Classes["interactive"].Requests == 0 || r.Classes["batch"].Requests == 0 {
				t.Errorf("requests per class %+v: the hostile paths were not exercised", r.Classes)
			}
			if len(r.GPU.Devices) != 1 || r.GPU.Devices[0].Name != "H100"+escapedEvil {
				t.Errorf("GPU devices %+v, want one named %q", r.GPU.Devices, "H100"+escapedEvil)
			}
			if r.Model != escapedEvil {
				t.Errorf("report model %q, want %q", r.Model, escapedEvil)
			}
		}
		for _, f := range []struct{ name, path string }{{"--trace-out", traces}, {"--record", rec}} {
			data, err := os.ReadFile(f.path)
			if err != nil || len(data) == 0 {
				t.Errorf("%s not written: %v", f.name, err)
				continue
			}
			checkJSON(t, f.name, data, true)
		}
	})

	t.Run("headless Markdown", func(t *testing.T) {
		t.Parallel()
		rep := filepath.Join(t.TempDir(), "r.md")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), testEnv(&stdout, &stderr), []string{"watch", "--config", cfg, "--headless", "--duration", "3s",
			"--report", rep, "--format", "markdown", "--gpu-metrics", url + "/dcgm"})
		checkText(t, "stderr", stderr.String())
		data, err := os.ReadFile(rep)
		if err != nil {
			t.Fatalf("exit %d, no report: %v\n%s", code, err, stderr.String())
		}
		checkText(t, "--report (Markdown)", string(data))
		if !strings.Contains(string(data), `H100m\\x1b\]0;pwned`) {
			t.Errorf("the Markdown report does not show the GPU name, escaped:\n%s", data)
		}
	})

	t.Run("console under tmux", func(t *testing.T) {
		t.Parallel()
		needTmux(t)
		bin := buildBinary(t)
		errFile := filepath.Join(t.TempDir(), "stderr")
		p := startPane(t, "tokentop-test-hostile", 160, 48,
			bin+" watch --config "+cfg+" --no-color --gpu-metrics "+url+"/dcgm 2>"+errFile+"; echo EXITED:$?; sleep 30")
		p.escapes = true
		screen, _ := p.waitFor(10*time.Second, showing(`H100m\x1b]0;`, "p50"))
		checkScreen(t, "the console", screen)
		if !strings.Contains(screen, `H100m\x1b]0;`) {
			t.Errorf("the console does not show the GPU name, escaped:\n%s", screen)
		}
		// The drill-downs: slowest requests (their errors), server, GPU.
		for _, key := range []string{"s", "m", "g"} {
			p.keys(key)
			time.Sleep(600 * time.Millisecond)
			checkScreen(t, "the console after "+key, p.screen())
		}
		screen = p.quit()
		checkScreen(t, "the terminal after quitting", screen)
		if !strings.Contains(screen, "EXITED:") {
			t.Errorf("the console did not quit:\n%s", screen)
		}
		if title := p.tmux("display-message", "-p", "-t", p.name, "#{pane_title}"); strings.Contains(title, "pwned") {
			t.Errorf("the server retitled the terminal: %q", title)
		}
		if data, err := os.ReadFile(errFile); err == nil {
			checkText(t, "the console's stderr", string(data))
		}
	})
}

// checkScreen fails when a terminal capture (with -e) shows the server's
// sequences took effect or arrived: any escape but tmux's own SGR, a red
// foreground (tokentop runs with --no-color), or another raw control.
func checkScreen(t *testing.T, what, screen string) {
	t.Helper()
	// The SGR sequences tmux writes for cell attributes.
	sgr := regexp.MustCompile("\x1b\\[([0-9;:]*)m")
	for _, m := range sgr.FindAllStringSubmatch(screen, -1) {
		for _, p := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ';' || r == ':' }) {
			if p == "31" {
				t.Errorf("%s is painted red (SGR %q) though tokentop runs with --no-color:\n%s", what, m[0], screen)
				return
			}
		}
	}
	checkText(t, what+" (tmux's SGR removed)", sgr.ReplaceAllString(screen, ""))
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return string(b)
}
