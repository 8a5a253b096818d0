package sim

import (
	"slices"
)

// Shrink looks for the shortest schedule that still fails invariant inv:
// it removes faults (delta debugging, then one at a time until none can
// go), then simplifies what is left (nodes left down at the heal, broken
// calm devices, clock drift, noise, fault durations). runs bounds the
// attempts; it returns the schedule and how many runs it took.
func Shrink(sc Schedule, opt Options, inv string, runs int) (Schedule, int) {
	opt.Trace = false
	n := 0
	fails := func(s Schedule) bool {
		if n >= runs {
			return false
		}
		n++
		r := Run(s, opt)
		return r.Failure != nil && r.Failure.Invariant == inv
	}
	with := func(fs []Fault) Schedule {
		s := sc
		s.Faults = fs
		return s
	}
	// ddmin over the faults.
	faults := slices.Clone(sc.Faults)
	for chunks := 2; len(faults) >= 1 && n < runs; {
		size := (len(faults) + chunks - 1) / chunks
		reduced := false
		for start := 0; start < len(faults); start += size {
			rest := slices.Concat(faults[:start], faults[min(start+size, len(faults)):])
			if fails(with(rest)) {
				faults, reduced = rest, true
				chunks = max(chunks-1, 2)
				break
			}
		}
		if !reduced {
			if size == 1 {
				break
			}
			chunks = min(chunks*2, len(faults))
		}
	}
	sc.Faults = faults
	try := func(change func(s *Schedule)) {
		s := sc
		s.Faults = slices.Clone(sc.Faults)
		s.PPM = slices.Clone(sc.PPM)
		s.Down = slices.Clone(sc.Down)
		s.CalmDev = slices.Clone(sc.CalmDev)
		change(&s)
		if fails(s) {
			sc = s
		}
	}
	if len(sc.Down) > 0 {
		try(func(s *Schedule) { s.Down = nil })
	}
	if len(sc.CalmDev) > 0 {
		try(func(s *Schedule) { s.CalmDev = nil })
	}
	if !sc.Quiet {
		try(func(s *Schedule) { s.Quiet = true })
	}
	try(func(s *Schedule) { clear(s.PPM) })
	for i := range sc.Faults {
		for range 3 {
			if sc.Faults[i].Dur < 2*1e6 {
				break
			}
			before := sc.Faults[i].Dur
			try(func(s *Schedule) { s.Faults[i].Dur /= 2 })
			if sc.Faults[i].Dur == before {
				break
			}
		}
	}
	return sc, n
}
