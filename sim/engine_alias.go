package sim

import (
	"time"

	"github.com/tokentop/tokentop/sim/engine"
)

// The engine, its knobs and Virtual live in package sim/engine, which does
// no I/O (the twin links it without a network stack); these names keep
// package sim's API whole for its callers.

// Knobs are the simulator's settings (engine.Knobs).
type Knobs = engine.Knobs

// EngineState is the engine's true state (engine.EngineState).
type EngineState = engine.EngineState

// Virtual is the engine in virtual time (engine.Virtual).
type Virtual = engine.Virtual

// VirtualRequest is one request offered to a Virtual engine.
type VirtualRequest = engine.VirtualRequest

// Metrics flavors (engine.Flavor*).
const (
	FlavorVLLMV1   = engine.FlavorVLLMV1
	FlavorVLLMV0   = engine.FlavorVLLMV0
	FlavorSGLang   = engine.FlavorSGLang
	FlavorTGI      = engine.FlavorTGI
	FlavorLlamaCpp = engine.FlavorLlamaCpp
)

// Version is reported in tokentop_sim_info.
const Version = engine.Version

// DefaultKnobs: engine.DefaultKnobs.
func DefaultKnobs() Knobs { return engine.DefaultKnobs() }

// NewVirtual: engine.NewVirtual.
func NewVirtual(k Knobs, start time.Time) (*Virtual, error) { return engine.NewVirtual(k, start) }

// Flavors: engine.Flavors.
func Flavors() []string { return engine.Flavors() }

// ScenarioNames: engine.ScenarioNames.
func ScenarioNames() []string { return engine.ScenarioNames() }

// Scenario: engine.Scenario.
func Scenario(name string) (Knobs, error) { return engine.Scenario(name) }

// Configure: engine.Configure.
func Configure(k *Knobs, hardwareName, scenario string) error {
	return engine.Configure(k, hardwareName, scenario)
}

// HardwareNames: engine.HardwareNames.
func HardwareNames() []string { return engine.HardwareNames() }

// LoadScale: engine.LoadScale.
func LoadScale(name string) float64 { return engine.LoadScale(name) }
