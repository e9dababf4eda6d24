package config

import "errors"

// Fluidity is the fluidity-index objective of a class (Etalon/Metron): each
// content token has a deadline made of the class's tightest TTFT and ITL
// targets (the first token's is the TTFT target, each next one's the one
// before plus the ITL target; a token early leaves its slack to the next,
// a token late starts the schedule again), and the objective asks for a
// share of tokens or of requests on time:
//
//	slo:
//	  itl: {p95: 150ms}
//	  fluidity: {token_share: 95%, requests_above_0_9: 90%}
//
// token_share is the least share of the class's tokens delivered by their
// deadline; requests_above_0_9 the least share of its requests whose own
// share (index) is above 0.9. Either or both; each a ratio in [0,1].
type Fluidity struct {
	TokenShare    *Ratio `yaml:"token_share"`
	RequestsAbove *Ratio `yaml:"requests_above_0_9"`
}

// validate checks a fluidity objective against its class's SLO: it needs a
// target and an ITL objective to take the pace from.
func (f *Fluidity) validate(slo *SLO) error {
	if f == nil {
		return nil
	}
	if f.TokenShare == nil && f.RequestsAbove == nil {
		return errors.New("slo.fluidity needs token_share or requests_above_0_9 (a ratio such as 95%)")
	}
	if slo.ITL.P50 == nil && slo.ITL.P95 == nil && slo.ITL.P99 == nil {
		return errors.New("slo.fluidity needs an itl objective: the token deadlines are paced by its tightest target")
	}
	return nil
}
