package twin

import (
	"fmt"
	"math"
	"slices"
)

// The other traffic's open-loop arrival rate, fitted in the twin where
// its parts share a shape.
//
// Its closed part's streams are the variance split's (inferOther): with
// both parts of one shape, the sequences in the server cannot tell them,
// since a closed stream's request replaces an open one's and the server
// holds as many (Little's law; fitting the streams to them let them run
// to 54 of a prefill-contention server's 57, where 8 were drawn). The
// open part's rate answers to three figures of the run, each weighed by
// its own error:
//   - the requests the other traffic finished a second, a Poisson count;
//   - the sequences it held in the server, their mean known to its batch
//     means' spread and the twin's sojourn to a tenth (sojournModelError);
//   - how fast those grew through the window.
//
// Away from its knee a server finishes what arrives and holds what that
// load holds, and the finishes set the rate. Near its knee a few percent
// more arrivals hold many more sequences (the queue takes minutes to
// settle), and a window's finishes fall short of its arrivals (a
// prefill-contention demo's finished 3.0 requests/s of the 3.25 arriving);
// there the sequences tell the rate the finishes cannot, and their growth
// keeps the twin from a rate beyond the server's capacity, where its queue
// would grow and the server's did not.

// sojournModelError is the relative error taken for the twin's sequences
// in the server at a given load, beyond their sampling: its requests'
// time in the server (E2E p95 within 2–3% at the median over the pair
// test, 13–25% at the worst) is taken to be right within a tenth.
const sojournModelError = 0.1

// openRateRounds is how many times the open part's rate is fitted, and
// openRateReplays how many replays of the window each round pools: near
// a knee one replay's sequences swing by a quarter.
const (
	openRateRounds  = 4
	openRateReplays = 2
	// openRateStep bounds one round's change of the rate (in logarithm).
	openRateStep = 0.2
)

// fitOpenRate fits the open part's arrival rate of other traffic whose
// parts share a shape (one shape), its closed streams held. The first
// round gives the open part the requests the closed part, in the twin,
// does not finish; each round after takes one Gauss–Newton step in the
// rate's logarithm on the three figures, their slopes from the last two
// rounds (drawn with the same seeds) or, at first, proportional to the
// open part. It returns the sources and the closed part's requests a
// second in the twin.
func (b *builder) fitOpenRate(sources []Source, other otherLoad) ([]Source, float64, error) {
	out, fit, err := b.fitOpenLoad(sources, other, 0)
	return out, fit.closed, err
}

// openFit is what fitOpenLoad's last round replayed: the closed and the
// open part's requests a second, and the other traffic's sequences in the
// server, with their standard error.
type openFit struct{ closed, open, held, heldSE float64 }

// fitOpenLoad is fitOpenRate; with wantClosed > 0 (two shapes, the closed
// part's share of the requests a second), the closed part's streams are
// fitted to finish that share, and the open part's rate answers to its
// own share of the finishes besides the sequences and their growth.
func (b *builder) fitOpenLoad(sources []Source, other otherLoad, wantClosed float64) ([]Source, openFit, error) {
	ci := -1
	var open []int
	for i, s := range sources {
		switch {
		case s.Group != OtherName:
		case s.Process == ProcClosed:
			ci = i
		default:
			open = append(open, i)
		}
	}
	rate, inSystem := other.rate, other.inSystem
	var closed float64
	var fit openFit
	var prev struct{ logRate, finished, held, growth float64 }
	havePrev, logRate := false, 0.0
	for round := range openRateRounds {
		outs, err := simulateReplicates(b.srv, sources, b.classes, b.warm, b.span, b.seed, openRateReplays)
		if err != nil {
			return nil, openFit{}, err
		}
		b.res.Runs += openRateReplays
		var growth, growthVar float64
		for _, o := range outs {
			g, v := seriesGrowth(o.otherInSystem, o.seconds)
			growth += g / openRateReplays
			growthVar += v / (openRateReplays * openRateReplays)
		}
		out := pool(outs)
		finished := 0.0
		for j, s := range sources {
			if s.Group == OtherName {
				finished += float64(out.srcFinished[j]) / out.seconds
			}
		}
		if ci >= 0 {
			closed = float64(out.srcFinished[ci]) / out.seconds
		}
		held, _ := meanVar(out.otherInSystem)
		fit = openFit{closed: closed, open: finished - closed, held: held, heldSE: batchMeansSE(out.otherInSystem)}
		if wantClosed > 0 && ci >= 0 && closed > 0 {
			// Half the gap a round, in proportion.
			n := float64(sources[ci].N) * math.Sqrt(wantClosed/closed)
			sources[ci].N = min(max(1, int(math.Round(n))), int(math.Round(inSystem)))
		}
		if round == 0 && wantClosed == 0 {
			// The open part takes the requests the closed part does not
			// finish.
			rest := math.Max(rate-closed, 0)
			if len(open) == 0 && ci >= 0 && rest >= 0.05*rate {
				sources = append(sources, Source{Name: OtherOpen, Group: OtherName, Kind: kindInteractive, Process: ProcPoisson,
					Prompt: sources[ci].Prompt, Output: sources[ci].Output, Origin: sources[ci].Origin + "; open loop: the requests the closed part does not account for"})
				open = append(open, len(sources)-1)
			}
			setOpenRate(sources, open, rest)
			continue
		}
		if len(open) == 0 {
			break
		}
		streams := 0.0
		if ci >= 0 {
			streams = float64(sources[ci].N)
		}
		// The finishes it answers to: with two shapes, the open part's own
		// against its share of the requests.
		want, got := rate, finished
		if wantClosed > 0 {
			want, got = math.Max(rate-wantClosed, 0), finished-closed
		}
		// Slopes in the rate's logarithm: proportional to the open part at
		// first, then from the last two rounds where they rose.
		dFinished, dHeld, dGrowth := math.Max(finished-closed, 0.01), math.Max(held-streams, 0.5), 0.0
		if d := logRate - prev.logRate; havePrev && math.Abs(d) > 0.01 {
			if s := (got - prev.finished) / d; s > 0 {
				dFinished = s
			}
			if s := (held - prev.held) / d; s > 0 {
				dHeld = s
			}
			dGrowth = math.Max((growth-prev.growth)/d, 0)
		}
		var num, den float64
		add := func(slope, gap, variance float64) {
			if slope > 0 && variance > 0 {
				num += slope * gap / variance
				den += slope * slope / variance
			}
		}
		add(dFinished, want-got, want/b.span+math.Max(got, 0)/out.seconds)
		if inSystem > 0 {
			add(dHeld, inSystem-held, other.heldVariance(batchMeansSE(out.otherInSystem)))
		}
		add(dGrowth, other.growth-growth, other.growthVar+growthVar)
		prev.logRate, prev.finished, prev.held, prev.growth, havePrev = logRate, got, held, growth, true
		if !(den > 0) {
			break
		}
		step := math.Max(math.Min(num/den, openRateStep), -openRateStep)
		logRate += step
		for _, j := range open {
			sources[j].Rate *= math.Exp(step)
		}
	}
	switch {
	case wantClosed > 0 && ci >= 0:
		sources[ci].fitted = fmt.Sprintf("; %d streams fitted in the twin to finish its share of the requests (%.2f/s), the open part's rate to its own share, the server's %.1f sequences and their growth", sources[ci].N, wantClosed, inSystem)
	case ci >= 0:
		sources[ci].fitted = fmt.Sprintf("; %d streams as the split gives, the open part's rate fitted in the twin to the server's %.2f requests/s and %.1f sequences", sources[ci].N, rate, inSystem)
	case len(open) > 0:
		sources[open[0]].fitted = fmt.Sprintf("; its rate fitted in the twin to the server's %.2f requests/s and %.1f sequences", rate, inSystem)
	}
	return sources, fit, nil
}

// setOpenRate gives the open sources at open a total rate, in their
// proportions (alike where they have none).
func setOpenRate(sources []Source, open []int, total float64) {
	var sum float64
	for _, j := range open {
		sum += sources[j].Rate
	}
	for _, j := range open {
		if sum > 0 {
			sources[j].Rate *= total / sum
		} else {
			sources[j].Rate = total / float64(len(open))
		}
	}
}

// heldVariance is the variance of the gap between the sequences in the
// server measured and those a replay holds (its mean's standard error
// replaySE): the two means' sampling and the twin's sojourn's error.
func (o otherLoad) heldVariance(replaySE float64) float64 {
	return o.inSystemSE*o.inSystemSE + replaySE*replaySE + math.Pow(sojournModelError*o.inSystem, 2)
}

// closedStreams is the other traffic's closed part's streams among
// sources (0 where it has none).
func closedStreams(sources []Source) int {
	if i := slices.IndexFunc(sources, func(s Source) bool { return s.Name == OtherClosed }); i >= 0 {
		return sources[i].N
	}
	return 0
}
