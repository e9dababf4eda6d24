package tui

import (
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"

	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
)

// Smallest terminal the console draws into; below it Render says so.
const (
	MinWidth  = 60
	MinHeight = 18
)

// The wide layout (classes side by side, framed panels) needs this much room.
const (
	wideMinWidth  = 120
	wideMinHeight = 34
	wideColWidth  = 60
)

// UIState is everything the console's picture depends on besides the data
// and the terminal size: the options, then each view's own state (a view
// keeps its state, the keys it takes and what it draws together in its
// file; Model routes keys and messages between them).
type UIState struct {
	Title   string
	NoColor bool
	// ASCII draws with ASCII characters only.
	ASCII bool
	// KnobsAvailable is true when the console can adjust a simulator.
	KnobsAvailable bool
	// WhatIfAvailable: the host predicts changes typed in the what-if
	// view (Options.OnWhatIf).
	WhatIfAvailable bool

	// Paused: the screen shows the data as it was when the user pressed
	// p; newer data is still gathered.
	Paused bool
	// Held is each live finding's history, by rule: how long it has held,
	// and whether it is fading (no longer raised, still listed a while so
	// it does not blink).
	Held map[string]Held

	mainView  // the class panels and the time series (mainview.go)
	drillView // the drill-downs (drill.go, slowest.go)
	helpView  // the help screen (help.go)
	knobPanel // the simulator's knobs (knobs.go)
	// Twin is the latest what-if twin (tui/twin.go), nil before the first.
	Twin *twinState
	// WhatIf is the what-if view's edit line (tui/whatif.go).
	WhatIf WhatIfEdit

	// renderer overrides lipgloss's default renderer (tests force colour).
	renderer *lipgloss.Renderer
}

// sameState is a cheap check that a key changed nothing on screen: every
// view's state but the data's.
func sameState(a, b *UIState) bool {
	return a.Paused == b.Paused && a.mainView == b.mainView && a.drillView == b.drillView && a.helpView == b.helpView &&
		a.knobPanel.equal(&b.knobPanel) && a.Twin == b.Twin && a.WhatIf.equal(&b.WhatIf)
}

// Render draws the console: never wider than width cells, never more than
// height lines. It is pure and cheap enough to run on every tick.
func Render(s *metrics.Snapshot, d diagnose.Diagnosis, width, height int, st UIState) string {
	if width <= 0 || height <= 0 {
		return ""
	}
	if width < MinWidth || height < MinHeight {
		return tooSmall(width, height)
	}
	r := &renderer{t: newTheme(st.NoColor, st.renderer), s: s, d: d, w: width, h: height, st: st}
	lines := r.render()
	if len(lines) > height {
		lines = lines[:height]
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(fit(l, width), " ")
	}
	out := strings.Join(lines, "\n")
	if st.ASCII {
		out = toASCII(out)
	}
	return out
}

func tooSmall(w, h int) string {
	msg := "terminal too small: need at least " + strconv.Itoa(MinWidth) + "×" + strconv.Itoa(MinHeight) +
		", have " + strconv.Itoa(w) + "×" + strconv.Itoa(h)
	lines := wrapWords(msg, w)
	if len(lines) > h {
		lines = lines[:h]
		lines[h-1] = fit(lines[h-1]+" "+ellipsis, w)
	}
	return strings.Join(lines, "\n")
}

type renderer struct {
	t    theme
	s    *metrics.Snapshot
	d    diagnose.Diagnosis
	w, h int
	st   UIState
	v    *metrics.View
}

func (r *renderer) render() []string {
	lines := r.header()
	bodyH := r.h - len(lines) - 1
	var body []string
	switch {
	case r.st.ShowHelp:
		body = r.help(bodyH)
	case r.st.Drill != "":
		body = r.drill(bodyH)
	case r.st.Expanded && r.s != nil:
		// The time series take the body, every class charted.
		body = append([]string{rule(r.t, r.trendTitle()+" · e or esc back", r.w)}, r.trendLines(r.w, bodyH-1, true)...)
	case r.st.ShowKnobs:
		// The knobs take the bottom of the screen so a presenter sees the
		// distributions move while turning them.
		knobs := r.knobsView(min(len(r.st.Knobs)+2, bodyH/2))
		body = append(r.main(bodyH-len(knobs)), knobs...)
	default:
		body = r.main(bodyH)
	}
	if len(body) > bodyH {
		body = body[:bodyH]
	}
	for len(body) < bodyH {
		body = append(body, "")
	}
	lines = append(lines, body...)
	return append(lines, r.footer())
}

func (r *renderer) header() []string {
	title := r.st.Title
	if title == "" {
		title = "tokentop"
	}
	if r.s == nil {
		return []string{fit(r.t.title(title), r.w), r.t.dim("no data yet")}
	}
	r.v = &r.s.Live
	tag := "LIVE " + fmtDur(r.s.Window) + " window"
	if r.st.RunView {
		r.v = &r.s.Run
		tag = "RUN whole session"
	}
	paint := r.t.label
	if r.st.Paused {
		// The data is still gathered; the screen says it is not live.
		tag = "PAUSED at " + r.s.At.Format("15:04:05") + " (p resumes) · " + tag
		paint = r.t.warn
	}
	first := spread(r.t.title(fit(title, max(r.w-cells(tag)-2, 1))), paint(tag), r.w)

	var reqs, errs, inflight int64
	for _, c := range r.v.Classes {
		reqs += c.Requests
		errs += c.Errors
		inflight += c.InFlight
	}
	// Source health comes before the totals: a stale source changes how
	// every number below should be read.
	sources := "elapsed " + fmtDur(r.s.At.Sub(r.s.Started)) + " ·" + r.freshness()
	totals := " reqs " + fmtInt(reqs) + " err "
	if errs > 0 {
		totals += r.t.bad(fmtInt(errs))
	} else {
		totals += "0"
	}
	// How much of the server's load is tokentop's own: its share of the
	// server's prompt work, generated tokens and sequences, from the
	// server's own counters; where the server cannot tell, the probe's
	// requests in flight against the server's running batch. The
	// footprint always shows: on a narrow screen its largest share alone,
	// in place of the in-flight count it sums up, or ahead of the totals.
	inFlight := " in-flight " + fmtInt(inflight)
	foot, short := r.footprint()
	line := sources + totals + inFlight
	switch {
	case foot == "":
		if sv := r.v.Server.Running; sv.Count > 0 {
			line += " (server running " + fmtNum(sv.Last) + ")"
		}
	case cells(line+" · "+foot) <= r.w:
		line += " · " + foot
	case cells(line+" · "+short) <= r.w:
		line += " · " + short
	case cells(sources+totals+" · "+short) <= r.w:
		line = sources + totals + " · " + short
	default:
		line = sources + " " + short + " ·" + totals
	}
	lines := []string{first, fit(line, r.w)}
	if c := r.captureLine(); c != "" {
		lines = append(lines, fit(c, r.w))
	}
	// Decisions taken from what the server said (a calibration refused,
	// usage ignored, load sized down): the latest, once there is one.
	for i := len(r.s.Sources) - 1; i >= 0; i-- {
		if ws := r.s.Sources[i].Warnings; len(ws) > 0 {
			lines = append(lines, fit(r.t.warn("note: "+ws[len(ws)-1]), r.w))
			break
		}
	}
	return lines
}

// freshness is each source's health: ✓, stale for how long, or waiting
// for its first success.
func (r *renderer) freshness() string {
	var b strings.Builder
	for _, src := range r.s.Sources {
		b.WriteString(" " + src.Name + " ")
		switch {
		case src.LastSuccess.IsZero():
			b.WriteString(r.t.warn("waiting"))
		case src.Stale:
			b.WriteString(r.t.bad("stale " + fmtDur(r.s.At.Sub(src.LastSuccess))))
		default:
			b.WriteString(r.t.ok("✓"))
		}
	}
	if len(r.s.Sources) > 0 {
		b.WriteString(" ·")
	}
	return b.String()
}

// footprint is tokentop's share of the server's work in the view, e.g.
// "probe 3% of prompt · 2% gen · 5% running", and its short form, the
// largest share alone ("probe 5% of running"); a share above the budget
// is marked. Both are "" when the server cannot tell any share.
func (r *renderer) footprint() (full, short string) {
	fp := &r.v.Probe.Footprint
	res, top, ok := fp.Largest()
	if !ok {
		return "", ""
	}
	pct := func(s float64) string {
		t := fmtPct0(s)
		if s > 0 && s < 0.005 {
			t = "<1%"
		}
		if fp.Budget > 0 && s > fp.Budget {
			return r.t.warn(t)
		}
		return t
	}
	words := map[string][2]string{
		metrics.ResourcePromptTokens:     {" of prompt", " of prompt"},
		metrics.ResourceGenerationTokens: {" gen", " of gen"},
		metrics.ResourceRunning:          {" running", " of running"},
	}
	var parts []string
	for _, name := range []string{metrics.ResourcePromptTokens, metrics.ResourceGenerationTokens, metrics.ResourceRunning} {
		if s := fp.Share(name); s != nil {
			parts = append(parts, pct(*s)+words[name][0])
		}
	}
	full, short = "probe "+strings.Join(parts, " · "), "probe "+pct(top)+words[res][1]
	if p := r.activePulse(); p != nil {
		// The probe holds for a calibration pulse: its share falls on
		// purpose, and its classes send nothing until the end.
		left := " " + fmtDur(p.End.Sub(r.s.At)) + " left"
		full += " · " + r.t.warn("held for calibration"+left)
		short += " · " + r.t.warn("held"+left)
	}
	return full, short
}

// activePulse is the calibration pulse the probe is holding for now; nil
// when none.
func (r *renderer) activePulse() *metrics.Pulse {
	if r.s == nil || len(r.s.Run.Pulses) == 0 {
		return nil
	}
	if p := &r.s.Run.Pulses[len(r.s.Run.Pulses)-1]; p.End.After(r.s.At) {
		return p
	}
	return nil
}

func (r *renderer) footer() string {
	// The key map's short list, most needed first; those that do not fit
	// go, "? help" lists them all.
	km := newKeyMap(r.st.KnobsAvailable, r.st.WhatIfAvailable)
	km.paused = r.st.Paused
	km.twin, km.editing = r.st.Drill == DrillTwin, r.st.WhatIf.Editing
	keys := km.footer(r.w)
	if r.st.Message != "" && !r.st.ShowKnobs {
		return spread(r.t.dim(keys), r.t.warn(r.st.Message), r.w)
	}
	return fit(r.t.dim(keys), r.w)
}
