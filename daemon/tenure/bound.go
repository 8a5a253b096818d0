package tenure

import (
	"slices"
	"time"
)

// BoundOf returns a point on the asking node's clock after which a former
// holder renewed its lease no more, from its last contact with each of the
// nodes that answered (the asker included); ok is false with fewer answers
// than a majority.
//
// Why it is safe: the former holder's last renewal started at s and was
// stored by a majority after s. Any majority of answers includes one of
// those nodes, F, whose last contact with the holder is at or after s. F
// answers "elapsed e" at a moment before the asker receives it at r, so
// s ≤ r − e: each contact is given as r − e. The majority-th smallest of
// them is at least F's, so it bounds s from above; the holder stops at
// s + lease − margin, and the successor waits until SuccessorWait(bound).
// A node with no record of the holder (it restarted) answers "now": the
// safe direction. A millisecond is added for the clock conversions.
func BoundOf(contacts []Time, majority int) (Time, bool) {
	if majority < 1 || len(contacts) < majority {
		return 0, false
	}
	c := slices.Clone(contacts)
	slices.Sort(c)
	return c[majority-1].Add(time.Millisecond), true
}
