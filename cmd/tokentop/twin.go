package main

import (
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/capacity"
	"github.com/tokentop/tokentop/diagnose"
	"github.com/tokentop/tokentop/metrics"
	"github.com/tokentop/tokentop/record"
	"github.com/tokentop/tokentop/report"
	"github.com/tokentop/tokentop/tui"
	"github.com/tokentop/tokentop/twin"
)

// whatIfFlag is --what-if, repeatable: each value is one change for the
// twin to predict, checked as it is parsed (a typo is a usage error).
type whatIfFlag []twin.Change

func (w *whatIfFlag) String() string {
	var s []string
	for _, c := range *w {
		s = append(s, c.String())
	}
	return strings.Join(s, " ")
}

func (w *whatIfFlag) Set(v string) error {
	c, err := twin.ParseChange(v)
	if err != nil {
		return err
	}
	*w = append(*w, c)
	return nil
}

const whatIfUsage = "a remedy for the twin to predict, as server or traffic knobs (repeatable), e.g. max-num-seqs=64,priority=on; knobs: "

// publishedLimits are the limits capacity discovery found that the twin
// takes as given rather than inferred: the sequence cap (slots) and the
// KV cache's size, each with its source.
func publishedLimits(c capacity.Capacity) twin.Published {
	return twin.Published{SeqCap: c.Slots.N, SeqCapSource: c.Slots.Source, KVTokens: c.KVTokens.N, KVTokensSource: c.KVTokens.Source}
}

// recordedLimits are published limits as a recording's header keeps them;
// nil when none is known.
func recordedLimits(p twin.Published) *record.Limits {
	if p.SeqCap <= 0 && p.KVTokens <= 0 {
		return nil
	}
	return &record.Limits{SeqCap: p.SeqCap, SeqCapSource: p.SeqCapSource, KVTokens: p.KVTokens, KVTokensSource: p.KVTokensSource}
}

// replayTwinSetup is a replay's twin setup: the recording's classes and
// published limits, the replay's --what-if. A recorded limit is bounded
// again here: the file may come from anywhere.
func replayTwinSetup(h record.Header, whatIf []twin.Change) twin.Setup {
	setup := twin.Setup{Classes: h.Classes, WhatIf: whatIf}
	if l := h.Limits; l != nil {
		if l.SeqCap > 0 && l.SeqCap <= maxPublishedSeqCap {
			setup.Published.SeqCap, setup.Published.SeqCapSource = l.SeqCap, l.SeqCapSource
		}
		if l.KVTokens > 0 && l.KVTokens <= maxPublishedKVTokens {
			setup.Published.KVTokens, setup.Published.KVTokensSource = l.KVTokens, l.KVTokensSource
		}
	}
	return setup
}

// Bounds of a recorded limit: beyond them it is not a server's.
const (
	maxPublishedSeqCap   = 1 << 16
	maxPublishedKVTokens = 1 << 34
)

// reportWithTwin is report.Build with the twin's section, and the
// findings' advice quoting the twin's predictions where it is reliable.
// scorecard is the console runner's live scorecard (nil without one).
func reportWithTwin(snap *metrics.Snapshot, setup twin.Setup, scorecard []twin.ScoreEntry, meta report.Meta) report.Report {
	d := diagnose.Evaluate(&snap.Run, setup.Classes)
	tw := twin.BuildFrom(snap, d, setup, setup.WhatIf)
	if tw != nil {
		tw.Scorecard = scorecard
	}
	d.Findings = diagnose.QuotePredictions(d.Findings, tw.Quotes())
	rep := report.Build(snap, d, meta)
	rep.Twin = report.TwinSection(tw)
	return rep
}

// twinToConsole hands each twin a runner builds to the console.
func twinToConsole(prog *tea.Program) func(twin.Built) {
	return func(b twin.Built) { prog.Send(tui.TwinMsg{Result: b.Result, At: b.At, Took: b.Took}) }
}
