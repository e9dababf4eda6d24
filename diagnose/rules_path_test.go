package diagnose

import (
	"testing"

	"github.com/tokentop/tokentop/config"
	"github.com/tokentop/tokentop/metrics"
)

// gatewayGzipView is a 20 s default watch through an nginx that gzips the
// event stream, in front of a server without /metrics: 10 direct streams
// of 20 chunks one event a read, 2 through the gateway delivered 14 events a
// read, their first token 500 ms later; the gateway's TTFT fails the
// interactive class's objective, the direct path's does not.
func gatewayGzipView() metrics.View {
	v := healthyView()
	v.Server = metrics.ServerStats{}
	v.Intervals = nil
	ic := &v.Classes[0]
	direct := metrics.PathStats{Path: "direct", Requests: 10, TTFT: dist(10, 290, 300, 300), ChunkGap: dist(57, 20, 22, 23), EventsPerRead: 1, Reads: 60}
	gw := metrics.PathStats{Path: "gateway", Requests: 2, TTFT: dist(2, 790, 803, 803), ChunkGap: dist(38, 0, 380, 410), EventsPerRead: 14, Reads: 3}
	ic.Paths = []metrics.PathStats{direct, gw}
	ic.Requests, ic.Judged, ic.Completed, ic.Valid, ic.GoodRequests = 5, 5, 5, 5, 5
	ic.TTFT = dist(12, 300, 803, 803)
	ic.ChunkGap = dist(95, 19, 380, 410)
	ic.ITL = ic.ChunkGap
	ic.Gaps = 95
	b := &v.Classes[1]
	b.TTFT = dist(3, 290, 301, 301)
	b.Requests, b.Judged, b.Completed, b.Valid = 3, 3, 3, 3
	return v
}

func TestProxyBufferingFromTwoStreams(t *testing.T) {
	v := gatewayGzipView()
	classes := config.Default().Classes // interactive TTFT p95 ≤ 800 ms
	d := Evaluate(&v, classes)
	if len(d.Findings) == 0 || d.Findings[0].Rule != RuleProxyBuffering {
		t.Fatalf("findings %v: 2 gateway streams delivered 14 events a read against 1 direct, want proxy_buffering first", rulesOf(d.Findings))
	}
	if f := findingOf(d, RuleUnexplained); f != nil {
		t.Errorf("the gateway's delay explains the TTFT miss: %s", f.Summary)
	}
	// The class's TTFT is the gateway's doing: the direct path waits no
	// longer than batch's, so no batch work is blamed.
	v.Classes[0].TTFT = dist(12, 700, 804, 804)
	if f := findingOf(Evaluate(&v, classes), RuleBatchInterference); f != nil {
		t.Errorf("batch_interference for a difference the gateway path explains: %s", f.Summary)
	}

	// One stream through the gateway is one flush: not enough to judge the
	// path.
	one := gatewayGzipView()
	one.Classes[0].Paths[1].Requests, one.Classes[0].Paths[1].Reads = 1, 1
	if f := findingOf(Evaluate(&one, classes), RuleProxyBuffering); f != nil {
		t.Errorf("proxy_buffering from one gateway stream: %s", f.Summary)
	}
}
