package daemon

import (
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
)

// frontEndFaults are the fault kinds a front end counts (mta), the
// milter's prefixed "milter ".
var frontEndFaults = []string{mta.FaultPanic, mta.FaultDecision, mta.FaultHoldRecord, mta.FaultFreeze,
	mta.FaultNoQuarantineAction, mta.FaultSpool}

// daemonFaults are the fault kinds the daemon itself counts.
var daemonFaults = []string{"reload", "redis unavailable", "redis bad state",
	"rate state flush", "rcptsets flush", "event log flush"}

// presetMetrics makes every fault kind, bad-input reason and running
// limit's decisions exist at zero from the start.
func (d *Daemon) presetMetrics() {
	kinds := append([]string(nil), daemonFaults...)
	for _, k := range frontEndFaults {
		kinds = append(kinds, k, "milter "+k)
	}
	reasons := []string{postfix.ReasonLineTooLong, postfix.ReasonTooManyAttributes, postfix.ReasonMalformed,
		postfix.ReasonUnknownRequest, postfix.ReasonUnexpectedEOF, postfix.ReasonTimeout, postfix.ReasonReadError,
		"milter " + milter.ReasonEmptyPacket, "milter " + milter.ReasonPacketTooLarge, "milter " + milter.ReasonTimeout}
	d.metrics.Preset(kinds, reasons)
	d.presetLimitMetrics()
}

// presetLimitMetrics makes the decisions (and quarantined) counts of
// every running limit exist at zero.
func (d *Daemon) presetLimitMetrics() {
	for _, l := range d.engine.Limits() {
		d.metrics.PresetDecision(l.Name, l.Action)
		if d.q.svc != nil && (l.Action == "hold" || l.Action == "freeze") {
			d.q.svc.PresetLimit(l.Name, l.Action)
		}
	}
}
