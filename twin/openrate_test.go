package twin

import (
	"math"
	"testing"
)

// kneeSources are the demo's prefill-contention load on a server that
// prefills whole prompts of up to 8,192 tokens a step (kneeServer):
// tokentop's Poisson class and closed-loop batch class, and other traffic
// of 3,000-token prompts arriving at open requests/s beside 8 closed
// streams of short prompts and long outputs. At 3 requests/s the server
// is near its knee: a few percent more arrivals hold many more sequences,
// and its queue takes minutes to settle.
func kneeSources(open float64) []Source {
	return []Source{
		{Name: "interactive", Group: "interactive", Kind: kindInteractive, Probe: true, Process: ProcPoisson, Rate: 2,
			Prompt: Length{Median: 700}, Output: Length{Median: 256}},
		{Name: "batch", Group: "batch", Kind: kindBatch, Probe: true, Process: ProcClosed, N: 4,
			Prompt: Length{Median: 1500}, Output: Length{Median: 120}, Priority: priorityBatch},
		{Name: OtherOpen, Group: OtherName, Kind: kindInteractive, Process: ProcPoisson, Rate: open,
			Prompt: Length{Median: 3000, Sigma: 0.6}, Output: Length{Median: 150, Sigma: 0.6}},
		{Name: OtherClosed, Group: OtherName, Kind: kindBatch, Process: ProcClosed, N: 8,
			Prompt: Length{Median: 200, Sigma: 0.6}, Output: Length{Median: 400, Sigma: 0.6}, Priority: priorityBatch},
	}
}

var kneeServer = Server{BaseMs: 10, PerPrefillTokenMs: 0.05, PerSequenceMs: 0.2, TokenBudget: 8192, ContextLen: 8192, KVTokens: 416000}

// TestOpenRateFromTheSequencesNearTheKnee: windows of a server near its
// knee, each three minutes after two of warm-up. The twin at the open rate
// the finishes give (the closed part's taken out) holds fewer sequences
// than the window did, as its queue has not settled; fitted to the
// finishes, the sequences and their growth, it holds about as many, with
// the rate still within a tenth of the arrivals.
func TestOpenRateFromTheSequencesNearTheKnee(t *testing.T) {
	const truth = 3.0
	var heldBefore, heldAfter, rateErr []float64
	for seed := range uint64(5) {
		m, err := simulate(kneeServer, kneeSources(truth), nil, 120, 180, 1000+seed)
		if err != nil {
			t.Fatal(err)
		}
		finished := float64(m.srcFinished[2]+m.srcFinished[3]) / m.seconds
		inSystem, _ := meanVar(m.otherInSystem)
		growth, growthVar := seriesGrowth(m.otherInSystem, m.seconds)
		other := otherLoad{rate: finished, inSystem: inSystem, inSystemSE: batchMeansSE(m.otherInSystem), growth: growth, growthVar: growthVar}
		b := &builder{srv: kneeServer, warm: warmS, span: 180, seed: seed, res: &Result{}}
		fitted, closed, err := b.fitOpenRate(kneeSources(finished), other)
		if err != nil {
			t.Fatal(err)
		}
		held := func(sources []Source) float64 {
			outs, err := simulateReplicates(kneeServer, sources, nil, warmS, 180, 77+seed, 4)
			if err != nil {
				t.Fatal(err)
			}
			h, _ := meanVar(pool(outs).otherInSystem)
			return h
		}
		before, after := held(kneeSources(finished-closed)), held(fitted)
		t.Logf("window %d: finished %.2f/s holding %.0f (±%.1f), growing %.3f/s; at %.2f/s open the twin holds %.0f, fitted to %.2f/s %.0f",
			seed, finished, inSystem, other.inSystemSE, growth, finished-closed, before, fitted[2].Rate, after)
		heldBefore = append(heldBefore, math.Abs(before-inSystem)/inSystem)
		heldAfter = append(heldAfter, math.Abs(after-inSystem)/inSystem)
		rateErr = append(rateErr, math.Abs(fitted[2].Rate-truth)/truth)
	}
	if median(heldAfter) >= median(heldBefore) || median(heldAfter) > 0.15 {
		t.Errorf("sequences held %.0f%% off the windows' at the median, at the finishes' rate %.0f%%", 100*median(heldAfter), 100*median(heldBefore))
	}
	if median(rateErr) > 0.1 {
		t.Errorf("fitted open rate %.0f%% off the arrivals at the median", 100*median(rateErr))
	}
}

// TestBatchMeansSEOfASwingingCount: a count that swings for tens of scrapes
// knows its mean far less well than its scrapes' number says; its batch
// means show it. White noise's they give about as the scrapes do.
func TestBatchMeansSEOfASwingingCount(t *testing.T) {
	white := make([]float64, 120)
	swing := make([]float64, 120)
	for i := range white {
		white[i] = math.Sin(float64(i) * 2.1) // no memory scrape to scrape
		swing[i] = 10 * math.Sin(2*math.Pi*float64(i)/80)
	}
	if se := batchMeansSE(white); se > 0.2 {
		t.Errorf("white noise of sd 0.7 over 120 scrapes: SE %.2f, want about 0.06", se)
	}
	if se := batchMeansSE(swing); se < 1.5 {
		t.Errorf("an 80-scrape swing of ±10: SE %.2f, want ~3 (two of its six batches are at its peaks)", se)
	}
}

// TestShapesByTheirSharesNearTheKnee: two shapes at a server near its
// knee, taken the other way round: the closed part's streams fitted to
// finish their shape's share of the requests, the open part's rate to its
// share, the sequences in the server and their growth. With the variance
// split not telling the streams (8 ± 40), the fit keeps them, with the
// drawn 8 streams and 3 requests/s open within a few of each; with a split
// that told 30 ± 2 streams, it does not.
func TestShapesByTheirSharesNearTheKnee(t *testing.T) {
	m, err := simulate(kneeServer, kneeSources(3), nil, 120, 180, 1003)
	if err != nil {
		t.Fatal(err)
	}
	openF, closedF := float64(m.srcFinished[2])/m.seconds, float64(m.srcFinished[3])/m.seconds
	rate := openF + closedF
	inSystem, _ := meanVar(m.otherInSystem)
	growth, growthVar := seriesGrowth(m.otherInSystem, m.seconds)
	src := kneeSources(3)
	other := otherLoad{rate: rate, inSystem: inSystem, inSystemSE: batchMeansSE(m.otherInSystem), growth: growth, growthVar: growthVar,
		openShare: 1 - 8/inSystem, varOpenShare: 1 - 8/inSystem, varClosedSE: 40,
		shapes: shapes{n: 2, share: [2]float64{closedF / rate, openF / rate},
			prompt: [2]Length{src[3].Prompt, src[2].Prompt}, output: [2]Length{src[3].Output, src[2].Output}}}
	fit := func(o otherLoad) []Source {
		b := &builder{srv: kneeServer, warm: warmS, span: 180, seed: 1, res: &Result{}}
		got, err := b.fitShapesByShares(src[:2], o, priorityBatch, 0)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := fit(other)
	if got == nil {
		t.Fatalf("two shapes not kept (finished %.2f/s open, %.2f/s closed, %.0f sequences)", openF, closedF, inSystem)
	}
	for _, s := range got {
		switch s.Name {
		case OtherOpen:
			if math.Abs(s.Rate-3)/3 > 0.15 {
				t.Errorf("open part %.2f/s, drawn 3", s.Rate)
			}
		case OtherClosed:
			if s.N < 4 || s.N > 16 {
				t.Errorf("closed part %d streams, drawn 8", s.N)
			}
		}
	}
	told := other
	told.varOpenShare, told.varClosedSE = 1-30/inSystem, 2
	if got := fit(told); got != nil {
		t.Error("two shapes kept against a split that told 30 ± 2 closed streams")
	}
}
